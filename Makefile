# fsdp: one binary (./fsdp), objects under build/. `make run` and `make test` first make
# sure the Debian packages are there (.ci/deps.sh). SANITIZE=1 builds with ASan+UBSan
# into build/asan. The CUDA parts build only when nvcc is found, the MPI parts when mpicc is.

CC      ?= gcc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -I. -Wall -Wextra -Wpointer-arith -Werror -pthread -MMD -MP
LDLIBS  += -lopenblas -lz -lcjson -lncursesw -lm -pthread

# The Debian packages come first, before anything below asks which tools are here: on a fresh
# machine `make test` installs Open MPI (.ci/deps.sh) and must then find mpicc, which the lines
# below look for once, when make reads this file. `make test` also asks for what only the tests
# use (`deps.sh test`: a headless chromium for the HTML view's browser test); `make run` does not.
DEPS_GOALS := run test viz viz-seed-order bench bench-vs-torch bench-ckpt bench-nvme bench-ac bench-plan \
	bench-mpi bench-viz fuzz
DEPS_ARGS := $(if $(filter test,$(MAKECMDGOALS)),test)
ifneq ($(filter $(DEPS_GOALS),$(MAKECMDGOALS)),)
ifneq ($(shell bash .ci/deps.sh $(DEPS_ARGS) >&2 && echo ok),ok)
$(error the Debian packages above are missing)
endif
endif

BUILD := build
ifeq ($(SANITIZE),1)
BUILD := build/asan
CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all -O1
LDFLAGS += -fsanitize=address,undefined
endif
BIN := $(if $(filter 1,$(SANITIZE)),$(BUILD)/fsdp,fsdp)

CUDA_HOME ?= /usr/local/cuda
NVCC := $(shell command -v nvcc 2>/dev/null || (test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc))
CUDA_SRCS := $(wildcard kernels/cuda/*.cu)

# The layers, lowest first (DESIGN.md, "Layout"). libfsdp.a (what a lesson's check links) is
# everything below cmd/; fsdp and the tests add cmd/, the lessons' runner and the backend loader.
LIB_SRCS := $(wildcard base/*.c kernels/*.c kernels/cpu/*.c engine/*.c models/*.c io/*.c \
	jobs/*.c sim/*.c sim/viz/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)

# runtime/ on the host side, in fsdp and the tests in every build (no CUDA or MPI header): where
# a process sits in a job (dist_env), the TCP rendezvous, `fsdp launch`, the runner of one
# process per rank both real backends share and the host device MPI's ranks run on. MPI's
# side (MPI_RUNTIME_SRCS) and the rest, CUDA's side, go into the backend libraries below.
HOST_RUNTIME_SRCS := runtime/dist_env.c runtime/tcp.c runtime/rendezvous.c runtime/launch.c \
	runtime/rank_process.c runtime/device_host.c
HOST_RUNTIME_OBJS := $(HOST_RUNTIME_SRCS:%.c=$(BUILD)/%.o)
MPI_RUNTIME_SRCS := runtime/comm_mpi.c runtime/mpi_run.c
CUDA_RUNTIME_SRCS := $(filter-out runtime/backends.c $(MPI_RUNTIME_SRCS) $(HOST_RUNTIME_SRCS), \
	$(wildcard runtime/*.c))

# The GPU backend: kernels/cuda (nvcc, sm_80, sm_89 (the L4) and sm_90, plus PTX) and the CUDA side of
# runtime/ (C against CUDA's headers), built when nvcc is found into $(BUILD)/libfsdp_cuda.so,
# which fsdp opens only when a command asks for a GPU (runtime/backends.c, linked into fsdp
# itself; the library resolves the engine's symbols against fsdp, hence -rdynamic). Sanitizer
# builds leave it out: ASan and the CUDA driver do not share an address space peacefully, and
# the sanitizers guard the CPU code.
ifneq ($(NVCC),)
ifneq ($(SANITIZE),1)
WITH_CUDA := 1
endif
endif
GPU_TEST_SRCS := $(wildcard tests/gpu/*.c)

# Open MPI (--backend mpi: one process per rank on CPUs), found through mpicc, which also says
# its flags. MPI's side of runtime/ goes into $(BUILD)/libfsdp_mpi.so, which fsdp opens only
# when a command asks for --backend mpi (runtime/backends.c), as it opens the CUDA library;
# $(BUILD)/mpi_check tests the communicator alone under mpirun (`make test`).
MPICC := $(shell command -v mpicc 2>/dev/null)
ifneq ($(MPICC),)
MPI_CFLAGS := $(shell $(MPICC) --showme:compile) -fPIC
MPI_LDLIBS := $(shell $(MPICC) --showme:link)
MPI_CHECK := $(BUILD)/mpi_check
MPI_OBJS := $(MPI_RUNTIME_SRCS:%.c=$(BUILD)/%.o)
MPI_LIB := $(BUILD)/libfsdp_mpi.so
BACKEND_CFLAGS += -DFSDP_MPI_LIB='"$(abspath $(MPI_LIB))"'
endif
ifeq ($(WITH_CUDA),1)
NVCCFLAGS ?= -O3
NVCCFLAGS += -std=c++17 -I. -Xcompiler -Wall,-Wextra,-Werror,-fPIC -MMD -MP \
	-gencode arch=compute_80,code=sm_80 -gencode arch=compute_89,code=sm_89 \
	-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
	-Xfatbin=-compress-all
CFLAGS += -DFSDP_HAVE_CUDA=1
CUDA_CFLAGS := -I$(CUDA_HOME)/include -fPIC
CUDA_OBJS := $(CUDA_SRCS:%.cu=$(BUILD)/%.o) $(CUDA_RUNTIME_SRCS:%.c=$(BUILD)/%.o)
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcublasLt -lcudart -lstdc++
CUDA_LIB := $(BUILD)/libfsdp_cuda.so
BACKEND_CFLAGS += -DFSDP_CUDA_LIB='"$(abspath $(CUDA_LIB))"'
endif
CMD_SRCS := $(wildcard cmd/*.c)
CMD_OBJS := $(CMD_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/runtime/backends.o
MAIN_OBJ := $(BUILD)/main.o $(CMD_OBJS) $(HOST_RUNTIME_OBJS)
TEST_SRCS := $(wildcard tests/*.c tests/engine/*.c tests/models/*.c tests/io/*.c tests/jobs/*.c \
	tests/cmd/*.c tests/kernels/*.c tests/sim/*.c tests/runtime/*.c tests/lessons/*.c tests/docs/*.c)
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/%.o)
TEST_BIN := $(BUILD)/test_fsdp
BENCH_SRCS := $(wildcard bench/*.c)
# built by `make test` too, so a bench that no longer compiles fails the suite
BENCH_BINS := $(BENCH_SRCS:bench/bench_%.c=$(BUILD)/bench_%)
BENCH_OBJS := $(BENCH_SRCS:%.c=$(BUILD)/%.o)
include lessons/lessons.mk

.PHONY: mpi-note all run viz viz-seed-order test test-asan test-gpu test-nccl gpu-bundle bench bench-mpi bench-ckpt bench-nvme bench-ac bench-plan bench-vs-torch fuzz bench-viz deps clean format cuda-note
all: $(BIN) $(CUDA_LIB) $(MPI_LIB) cuda-note mpi-note

mpi-note:
ifeq ($(MPICC),)
	@echo "mpicc not found (apt-get install libopenmpi-dev openmpi-bin): the MPI parts are left out"
endif

cuda-note:
ifeq ($(NVCC),)
	@echo "nvcc not found (set CUDA_HOME): built the simulator only"
else ifneq ($(WITH_CUDA),1)
	@echo "sanitizer build: the CUDA backend is left out"
endif

$(BIN): $(LIB_OBJS) $(MAIN_OBJ) | $(CUDA_LIB) $(MPI_LIB)
	$(CC) $(LDFLAGS) -rdynamic -o $@ $^ $(LDLIBS) -ldl

$(CUDA_LIB): $(CUDA_OBJS)
	$(CC) -shared -o $@ $^ $(CUDA_LDLIBS)

$(MPI_LIB): $(MPI_OBJS)
	$(CC) $(LDFLAGS) -shared -o $@ $^ $(MPI_LDLIBS)

$(BUILD)/runtime/backends.o: runtime/backends.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BACKEND_CFLAGS) -c -o $@ $<

# fsdp as a build without nvcc and mpicc makes it, for the tests of what such a build says when
# asked for --backend cuda or mpi: the same objects, the backend loader told of no library.
NO_BACKENDS_BIN := $(BUILD)/fsdp_no_backends
$(BUILD)/runtime/backends_none.o: runtime/backends.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(NO_BACKENDS_BIN): $(LIB_OBJS) $(filter-out $(BUILD)/runtime/backends.o,$(MAIN_OBJ)) \
		$(BUILD)/runtime/backends_none.o $(LESSONS_RUNNER_OBJS)
	$(CC) $(LDFLAGS) -rdynamic -o $@ $^ $(LDLIBS) -ldl

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# The CPU kernels never read errno: without it, GCC may vectorise sqrtf (Adam's update) instead
# of keeping a call to libm for a negative argument's EDOM. sqrt is correctly rounded either way.
$(BUILD)/kernels/cpu/%.o: CFLAGS += -fno-math-errno

$(BUILD)/runtime/%.o: runtime/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CUDA_CFLAGS) -c -o $@ $<

# Without CUDA's include path, so that the host side cannot come to need it by accident.
$(HOST_RUNTIME_OBJS): $(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/kernels/cuda/%.o: kernels/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

$(BUILD)/tests/gpu/%.o: tests/gpu/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CUDA_CFLAGS) -c -o $@ $<

$(TEST_BIN): $(LIB_OBJS) $(CMD_OBJS) $(LESSONS_RUNNER_OBJS) $(HOST_RUNTIME_OBJS) $(TEST_OBJS)
	$(CC) $(LDFLAGS) -rdynamic -o $@ $^ $(LDLIBS) -ldl -lcriterion

deps:
	@bash .ci/deps.sh

# The workshop walkthrough: the toy's one training step, event by event, in FSDP2's order (the
# next unit gathered ahead while one computes; in backward a unit freed before its reduce-scatter
# runs). viz-seed-order: the same step in the workshop seed's strict order (per unit all-gather,
# compute, free; in backward all-gather, backward, reduce-scatter, free).
viz: deps $(BIN)
	@echo "FSDP2's order (prefetch; a unit freed before its reduce-scatter); the seed's: make viz-seed-order"
	./$(BIN) viz --model toy --ranks 3 --strategy zero3

viz-seed-order: deps $(BIN)
	@echo "the workshop seed's strict order (no prefetch; reduce-scatter, then free); FSDP2's: make viz"
	./$(BIN) viz --model toy --ranks 3 --strategy zero3 --seed-order

# The main job: vit-tiny on FashionMNIST, FSDP (zero3) on 4 simulated ranks, one epoch.
run: deps $(BIN)
	./$(BIN) train --model vit-tiny --ranks 4 --epochs 1

# Tests run the binary for the CLI cases, so they get its path. Under SANITIZE=1 the test runner's
# own leak is suppressed (tests/lsan.supp says which and why).
TEST_LSAN := $(if $(filter 1,$(SANITIZE)),LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp)
test: deps $(BIN) $(TEST_BIN) $(MPI_CHECK) $(NO_BACKENDS_BIN) $(BENCH_BINS) mpi-note
	$(TEST_LSAN) FSDP_CHECK_STREAMS=1 FSDP_CACHE=$(BUILD)/cache FSDP_BIN=./$(BIN) \
		FSDP_MPI_CHECK=$(if $(MPI_CHECK),./$(MPI_CHECK)) \
		FSDP_NO_BACKENDS_BIN=./$(NO_BACKENDS_BIN) ./$(TEST_BIN) --jobs 2

test-asan:
	$(MAKE) SANITIZE=1 test

# The GPU's own tests (kernels against the CPU's, a training step against the simulator).
# Where there is no GPU each test is skipped with the reason; without nvcc nothing is built.
test-gpu: $(BIN)
ifeq ($(WITH_CUDA),1)
	@$(MAKE) --no-print-directory $(BUILD)/test_gpu $(BUILD)/nccl_check
	@./$(BIN) train --backend auto --ranks 1 --print-plan | head -1
	FSDP_CACHE=$(BUILD)/cache FSDP_BIN=./$(BIN) FSDP_NCCL_CHECK=./$(BUILD)/nccl_check ./$(BUILD)/test_gpu --jobs 1
else
	@echo "test-gpu: skipped: the CUDA backend is not built (nvcc not found, or SANITIZE=1)"
endif

# NCCL alone: 2 and 4 ranks on this machine's GPU(s) under fsdp launch, and the watchdog.
test-nccl: $(BIN)
ifeq ($(WITH_CUDA),1)
	@$(MAKE) --no-print-directory $(BUILD)/test_gpu $(BUILD)/nccl_check
	FSDP_CACHE=$(BUILD)/cache FSDP_BIN=./$(BIN) FSDP_NCCL_CHECK=./$(BUILD)/nccl_check ./$(BUILD)/test_gpu --jobs 1 \
		--filter 'nccl/*'
else
	@echo "test-nccl: skipped: the CUDA backend is not built (nvcc not found, or SANITIZE=1)"
endif

# One folder, $(BUILD)/gpu-bundle (at most 64 MiB), to copy to a GPU machine that has the driver,
# CUDA, NCCL and PyTorch but no -dev packages and no network: the programs, the libraries such a
# machine lacks, the data set and run.sh (docs/gpus.md, "Running on a GPU machine").
gpu-bundle: $(BIN)
ifeq ($(WITH_CUDA),1)
	@$(MAKE) --no-print-directory $(CUDA_LIB) $(BUILD)/test_gpu $(BUILD)/nccl_check
	bash gpu/bundle.sh $(BUILD)/gpu-bundle ./$(BIN) $(CUDA_LIB) $(BUILD)/test_gpu $(BUILD)/nccl_check
else
	@echo "gpu-bundle: skipped: the CUDA backend is not built (nvcc not found, or SANITIZE=1)"
endif

$(BUILD)/nccl_check: $(LIB_OBJS) $(HOST_RUNTIME_OBJS) $(CUDA_OBJS) $(BUILD)/tests/nccl/nccl_check.o
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LDLIBS)

$(MPI_OBJS) $(BUILD)/tests/mpi/mpi_check.o: $(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -c -o $@ $<

$(BUILD)/mpi_check: $(LIB_OBJS) $(HOST_RUNTIME_OBJS) $(BUILD)/runtime/comm_mpi.o \
		$(BUILD)/tests/mpi/mpi_check.o
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(MPI_LDLIBS)

$(BUILD)/tests/nccl/%.o: tests/nccl/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CUDA_CFLAGS) -c -o $@ $<

$(BUILD)/test_gpu: $(LIB_OBJS) $(HOST_RUNTIME_OBJS) $(CUDA_OBJS) $(GPU_TEST_SRCS:%.c=$(BUILD)/%.o) \
		$(BUILD)/tests/util.o $(BUILD)/tests/main.o
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LDLIBS) -lcriterion

bench: deps $(BUILD)/bench_toy
	./$(BUILD)/bench_toy

# vit-tiny training speed at 1 and 4 ranks (global batch 64) and PyTorch's (1 and 2 threads,
# when Debian's python3-torch is installed), interleaved round by round, medians of 5; with the
# model's GFLOP/s beside OpenBLAS's at the model's GEMM shapes, timed in the same rounds.
bench-vs-torch: deps $(BUILD)/bench_vit
	/usr/bin/python3 bench/bench_vs_torch.py --bench ./$(BUILD)/bench_vit --batch 64 --ranks 4 \
		--rounds 5

# Sharded checkpoint save and load of vit-workshop at 4 ranks against dd on the same disk.
bench-ckpt: deps $(BUILD)/bench_ckpt
	./$(BUILD)/bench_ckpt --model vit-workshop --ranks 4 --runs 3

# The NVMe tier (--offload nvme): 1 GiB written and read in 64 MiB units, two in flight,
# against dd on the same disk (/var/tmp) in the same run.
bench-nvme: deps $(BUILD)/bench_nvme
	$(BUILD)/bench_nvme --bytes 1G --chunk 64M --dir /var/tmp/fsdp_bench_nvme

# fsdp plan's own speed: 70B on 1,024 GPUs; 405B on 16,384 (GPT-shaped by --params, and Llama
# 3's preset) and on 131,072, planned (target: under 1 s) and searched (target: under 10 s); the
# 192 GB GPU is one on which some configurations of llama3-405b fit at sequence 8192.
bench-plan: deps $(BIN)
	FSDP_BIN=./$(BIN) bench/bench_plan.sh 5 --params 70e9 --gpus 1024 --param-dtype bf16
	FSDP_BIN=./$(BIN) bench/bench_plan.sh 5 --params 70e9 --gpus 1024 --param-dtype bf16 \
		--activation-checkpointing
	FSDP_BIN=./$(BIN) bench/bench_plan.sh 5 --params 70e9 --gpus 1024 --param-dtype bf16 \
		--activation-checkpointing --compare
	FSDP_BIN=./$(BIN) bench/bench_plan.sh 5 --params 405e9 --seq 8192 --gpus 16384 \
		--param-dtype bf16 --activation-checkpointing
	FSDP_BIN=./$(BIN) bench/bench_plan.sh 5 --model llama3-405b --gpus 16384 --param-dtype bf16 \
		--activation-checkpointing
	FSDP_BIN=./$(BIN) bench/bench_plan.sh 5 --model llama3-405b --gpus 131072 --param-dtype bf16 \
		--activation-checkpointing --compare
	FSDP_BIN=./$(BIN) bench/bench_plan.sh 5 --params 405e9 --seq 8192 --gpus 16384 --search
	FSDP_BIN=./$(BIN) bench/bench_plan.sh 5 --model llama3-405b --gpus 16384 --search
	FSDP_BIN=./$(BIN) bench/bench_plan.sh 5 --model llama3-405b --gpus 16384 --gpu-mem 192 --search
	FSDP_BIN=./$(BIN) bench/bench_plan.sh 5 --params 70e9 --gpus 1024 --search

# Activation checkpointing's memory saving and step-time cost, with and without, interleaved:
# vit-tiny (3 runs of 10 steps), then vit-workshop (one run of 2 steps each: about 10 minutes).
bench-ac: deps $(BIN)
	FSDP_BIN=./$(BIN) bench/bench_ac.sh vit-tiny 4 64 10 3
	FSDP_BIN=./$(BIN) bench/bench_ac.sh vit-workshop 4 8 2 1

# --backend mpi against the simulator: vit-tiny at 2 ranks, global batch 64, interleaved.
bench-mpi: deps $(BIN)
	FSDP_BIN=./$(BIN) bench/bench_mpi.sh 2 64 40 5

# The visualizer at vit-workshop's size: 8 ranks, 100,000 trace events.
bench-viz: deps $(BUILD)/bench_viz
	./$(BUILD)/bench_viz

# Named one by one: a pattern here would have to be the rule's own ($(BUILD)/%.o) to count, so
# a fresh build deleted them as intermediates and the next `make test` compiled them again.
.SECONDARY: $(BENCH_OBJS)
$(BUILD)/bench_%: $(LIB_OBJS) $(BUILD)/bench/bench_%.o
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# libFuzzer targets for the readers of untrusted files (safetensors, checkpoint metadata, trace
# files with the frames drawn from them, the IDX data set), built with clang, ASan and UBSan
# into build/fuzz; each runs FUZZ_SECONDS (default 60) from the seeds in tests/fuzz/corpus (a
# toy's --save-full file, checkpoint meta.json, a toy's trace, one IDX image and label). A crash
# leaves its input in build/fuzz/ (crash-*): make it a test.
FUZZ_SECONDS ?= 60
FUZZ_SRCS := $(LIB_SRCS)
FUZZ_FLAGS := -g -O1 -std=c11 -D_GNU_SOURCE -I. -Wall -Wextra -Werror -pthread \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_TARGETS := safetensors ckpt_meta trace idx
fuzz: deps $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)
	@mkdir -p build/fuzz/corpus-safetensors build/fuzz/corpus-ckpt_meta build/fuzz/corpus-trace \
		build/fuzz/corpus-idx
	cp tests/fuzz/corpus/*.safetensors build/fuzz/corpus-safetensors/
	cp tests/fuzz/corpus/*_meta.json build/fuzz/corpus-ckpt_meta/
	cp tests/fuzz/corpus/*.trace.json build/fuzz/corpus-trace/
	cp tests/fuzz/corpus/idx_*.bin build/fuzz/corpus-idx/
	cd build/fuzz && ./fuzz_safetensors -max_total_time=$(FUZZ_SECONDS) -max_len=4096 corpus-safetensors
	cd build/fuzz && ./fuzz_ckpt_meta -max_total_time=$(FUZZ_SECONDS) -max_len=4096 corpus-ckpt_meta
	cd build/fuzz && ./fuzz_trace -max_total_time=$(FUZZ_SECONDS) -max_len=80000 corpus-trace
	cd build/fuzz && ./fuzz_idx -max_total_time=$(FUZZ_SECONDS) -max_len=4096 corpus-idx

build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_SRCS)
	@command -v clang >/dev/null || { echo "make fuzz needs clang (apt-get install clang)"; exit 1; }
	@mkdir -p build/fuzz
	clang $(FUZZ_FLAGS) -o $@ $< $(FUZZ_SRCS) $(filter-out -pthread,$(LDLIBS))

format:
	clang-format -i $(LIB_SRCS) $(CMD_SRCS) $(HOST_RUNTIME_SRCS) main.c $(TEST_SRCS) $(BENCH_SRCS) \
		$(MPI_RUNTIME_SRCS) $(wildcard tests/mpi/*.c) \
		$(wildcard */*.h */*/*.h)

clean:
	rm -rf build fsdp

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
