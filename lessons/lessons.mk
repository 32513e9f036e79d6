# lessons/: the runner (./fsdp lessons) and what a lesson's check links against. Included by
# the Makefile after LIB_OBJS, CFLAGS and LDLIBS are final.
#
# A check is lessons/NN-topic/check.c (Criterion) compiled with the learner's exercise.c and
# linked against $(BUILD)/libfsdp.a, with the same compiler, flags (sanitizers included under
# SANITIZE=1) and libraries as the project: the runner gets them from a header this file writes.
# No path of this checkout is written there: the runner finds its checkout from where the binary
# is (lesson_index.c), so a copied or moved checkout checks its own lessons.

# These rules come before the Makefile's `all`: keep `all` the default goal.
LESSONS_SAVED_GOAL := $(.DEFAULT_GOAL)

LESSONS_RUNNER_SRCS := $(filter-out lessons/tool/ring.c,$(wildcard lessons/tool/*.c))
LESSONS_RUNNER_OBJS := $(LESSONS_RUNNER_SRCS:%.c=$(BUILD)/%.o)
# What checks link against beyond the engine: the ring wire of lessons 03 and 04.
LESSONS_LIB_OBJS := $(BUILD)/lessons/tool/ring.o
LESSONS_ARCHIVE := $(BUILD)/libfsdp.a
LESSONS_BAKED_H := $(BUILD)/lessons/lessons_baked.h

$(BIN): $(LESSONS_RUNNER_OBJS) | $(LESSONS_ARCHIVE)
# The tests run checks, which link against the archive.
test: $(LESSONS_ARCHIVE)

$(LESSONS_ARCHIVE): $(LIB_OBJS) $(LESSONS_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

# Rewritten on every make, but only touched when a flag changed, so the runner is rebuilt
# exactly when how a check must be built changed.
$(LESSONS_BAKED_H): FORCE
	@mkdir -p $(dir $@)
	@{ echo '/* written by lessons/lessons.mk: how this build compiles and links a check */'; \
	   echo '#define LESSONS_CC "$(CC)"'; \
	   echo '#define LESSONS_CFLAGS "$(filter-out -MMD -MP,$(CFLAGS))"'; \
	   echo '#define LESSONS_LDFLAGS "$(LDFLAGS)"'; \
	   echo '#define LESSONS_ARCHIVE_IN_CHECKOUT "$(LESSONS_ARCHIVE)"'; \
	   echo '#define LESSONS_LDLIBS "-Wl,--as-needed $(LDLIBS) -lcriterion"'; \
	} > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@

$(BUILD)/lessons/tool/%.o: lessons/tool/%.c $(LESSONS_BAKED_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(BUILD)/lessons -c -o $@ $<

.PHONY: lessons format-lessons FORCE
FORCE:

# Every lesson's check on the learner's own files. Exits non-zero while any lesson is not
# done yet, which on a fresh clone is all of them.
lessons: $(BIN) $(LESSONS_ARCHIVE)
	./$(BIN) lessons check all

format: format-lessons
format-lessons:
	clang-format -i $(wildcard lessons/tool/*.c lessons/*/exercise.c lessons/*/check.c \
		lessons/solutions/*.c)

.DEFAULT_GOAL := $(LESSONS_SAVED_GOAL)
