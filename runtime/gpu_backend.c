/* gpu_backend: opens libfsdp_cuda.so on the first command that asks for a GPU, so the simulator,
 * the planner and the lessons start without loading CUDA. */
#include "runtime/gpu_backend.h"

#include <dlfcn.h>
#include <stdio.h>

typedef int (*AvailableFn)(char *why, size_t n);
typedef int (*RunFn)(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out,
                     Err *err);

static AvailableFn available;
static RunFn run;

#ifdef FSDP_CUDA_LIB
/* Opens the backend once. Its references to the engine (engine/, sim/, ...) resolve against this
 * binary, which exports its symbols (-rdynamic), so the engine exists once per process. */
static int load(char *why, size_t n) {
    static void *lib;
    if (lib) return 1;
    void *h = dlopen(FSDP_CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, n, "the CUDA backend did not load: %s", dlerror());
        return 0;
    }
    available = (AvailableFn)dlsym(h, "gpu_available");
    run = (RunFn)dlsym(h, "gpu_run");
    if (!available || !run) {
        snprintf(why, n, "the CUDA backend %s lacks gpu_available or gpu_run", FSDP_CUDA_LIB);
        dlclose(h);
        return 0;
    }
    lib = h;
    return 1;
}
#else
static int load(char *why, size_t n) {
    snprintf(why, n, "this fsdp was built without CUDA: nvcc was not found");
    return 0;
}
#endif

int gpu_backend_available(char *why, size_t n) {
    return load(why, n) && available(why, n);
}

int gpu_backend_run(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out,
                    Err *err) {
    if (!run) return err_set(err, ERR_INTERNAL, "the CUDA backend is not loaded");
    return run(opt, fn, arg, out, err);
}
