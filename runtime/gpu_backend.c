/* gpu_backend: opens libfsdp_cuda.so on the first command that asks for a GPU, so the simulator,
 * the planner and the lessons start without loading CUDA. */
#include "runtime/gpu_backend.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int (*AvailableFn)(char *why, size_t n);
typedef int (*RunFn)(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out,
                     Err *err);

static AvailableFn available;
static RunFn run;

#ifdef FSDP_CUDA_LIB
/* Opens the backend once. Its references to the engine (engine/, sim/, ...) resolve against this
 * binary, which exports its symbols (-rdynamic), so the engine exists once per process. */
/* The backend beside this binary (a copied bundle: fsdp and libfsdp_cuda.so in one folder),
 * else in the build folder beside it (a checkout, whatever its path now), else where this build
 * put it. Opens the first that exists; *path says which. */
static void *open_backend(char *path, size_t n) {
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *slash = NULL;
    if (len > 0) {
        exe[len] = 0;
        slash = strrchr(exe, '/');
    }
    static const char *const beside[] = {"libfsdp_cuda.so", "build/libfsdp_cuda.so"};
    for (int i = 0; slash && i < 2; i++) {
        snprintf(path, n, "%.*s/%s", (int)(slash - exe), exe, beside[i]);
        if (access(path, R_OK) == 0) return dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    snprintf(path, n, "%s", FSDP_CUDA_LIB);
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static int load(char *why, size_t n) {
    static void *lib;
    if (lib) return 1;
    char path[4200];
    void *h = open_backend(path, sizeof path);
    if (!h) {
        snprintf(why, n, "the CUDA backend did not load: %s", dlerror());
        return 0;
    }
    available = (AvailableFn)dlsym(h, "gpu_available");
    run = (RunFn)dlsym(h, "gpu_run");
    if (!available || !run) {
        snprintf(why, n, "the CUDA backend %s lacks gpu_available or gpu_run", path);
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
