/* backends: opens a real backend's library on the first command that asks for it
 * (runtime/backends.h), beside this binary or where this build put it. */
#include "runtime/backends.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int (*AvailableFn)(char *why, size_t n);
typedef int (*RunFn)(const ClusterOptions *opt, RankMain fn, void *arg, ClusterResult *out,
                     Err *err);

#ifndef FSDP_CUDA_LIB
#define FSDP_CUDA_LIB NULL
#endif
#ifndef FSDP_MPI_LIB
#define FSDP_MPI_LIB NULL
#endif

typedef struct Library {
    const char *file;    /* its name beside the binary */
    const char *built;   /* where this build put it; NULL: this build left it out */
    const char *missing; /* why, when it was left out */
    const char *available_fn, *run_fn;
    /* RTLD_GLOBAL for MPI: Open MPI opens its own components, which look for libmpi's symbols
     * in the global scope */
    int flags;
    void *handle;
    AvailableFn available;
    RunFn run;
} Library;

static Library libraries[REAL_BACKEND_COUNT] = {
    [REAL_CUDA] = {"libfsdp_cuda.so", FSDP_CUDA_LIB,
                   "this fsdp was built without CUDA: nvcc was not found", "gpu_available",
                   "gpu_run", RTLD_NOW | RTLD_LOCAL},
    [REAL_MPI] = {"libfsdp_mpi.so", FSDP_MPI_LIB,
                  "this fsdp was built without MPI: mpicc was not found (apt-get install "
                  "libopenmpi-dev openmpi-bin)",
                  "fsdp_mpi_available", "fsdp_mpi_run", RTLD_NOW | RTLD_GLOBAL},
};

/* The library beside this binary (a copied bundle: fsdp and the library in one folder), else in
 * the build folder beside it (a checkout, whatever its path now), else where this build put it.
 * Opens the first that exists; *path says which. Its references to the engine (engine/, sim/,
 * ...) resolve against this binary, which exports its symbols (-rdynamic), so the engine exists
 * once per process. */
static void *open_library(const Library *l, char *path, size_t n) {
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *slash = NULL;
    if (len > 0) {
        exe[len] = 0;
        slash = strrchr(exe, '/');
    }
    static const char *const folders[] = {"", "build/"};
    for (int i = 0; slash && i < 2; i++) {
        snprintf(path, n, "%.*s/%s%s", (int)(slash - exe), exe, folders[i], l->file);
        if (access(path, R_OK) == 0) return dlopen(path, l->flags);
    }
    snprintf(path, n, "%s", l->built);
    return dlopen(path, l->flags);
}

static int load(Library *l, char *why, size_t n) {
    if (l->handle) return 1;
    if (!l->built) {
        snprintf(why, n, "%s", l->missing);
        return 0;
    }
    char path[4200];
    void *h = open_library(l, path, sizeof path);
    if (!h) {
        snprintf(why, n, "%s did not load: %s", l->file, dlerror());
        return 0;
    }
    l->available = (AvailableFn)dlsym(h, l->available_fn);
    l->run = (RunFn)dlsym(h, l->run_fn);
    if (!l->available || !l->run) {
        snprintf(why, n, "%s lacks %s or %s", path, l->available_fn, l->run_fn);
        dlclose(h);
        return 0;
    }
    l->handle = h;
    return 1;
}

int backend_available(RealBackend b, char *why, size_t n) {
    Library *l = &libraries[b];
    return load(l, why, n) && l->available(why, n);
}

int backend_run(RealBackend b, const ClusterOptions *opt, RankMain fn, void *arg,
                ClusterResult *out, Err *err) {
    const Library *l = &libraries[b];
    if (!l->run) return err_set(err, ERR_INTERNAL, "the %s backend is not loaded", l->file);
    return l->run(opt, fn, arg, out, err);
}
