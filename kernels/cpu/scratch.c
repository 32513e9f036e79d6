/* scratch: each thread's cache of host buffers for the CPU kernels' temporaries, reused call
 * after call: the same bytes land in pages already mapped, where calloc and free per op had the
 * kernel map, zero and fault in fresh ones (twice the page faults, a sixth of a bf16 step's CPU
 * time, on the 2-vCPU machines here). */
#include "kernels/cpu/scratch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* Buffers a thread keeps: a bf16 op widens at most a dozen operands (dtype_cpu.c's WIDE_MAX),
 * nested calls a few more. */
enum { SCRATCH_KEEP = 16, ALIGN = 64 };

/* Each buffer's capacity sits in the 64 bytes before it. */
typedef struct Header {
    size_t cap;
    unsigned char pad[ALIGN - sizeof(size_t)];
} Header;

typedef struct Cache {
    Header *kept[SCRATCH_KEEP];
    int n;
} Cache;

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void cache_free(void *v) {
    Cache *c = v;
    for (int i = 0; i < c->n; i++) free(c->kept[i]);
    free(c);
}

static void cache_key_create(void) {
    if (pthread_key_create(&cache_key, cache_free)) abort();
}

static void no_memory(size_t bytes) {
    fprintf(stderr, "kernels_cpu: no host memory for %zu bytes of scratch\n", bytes);
    abort();
}

static Cache *this_thread(void) {
    pthread_once(&cache_once, cache_key_create);
    Cache *c = pthread_getspecific(cache_key);
    if (!c && (!(c = calloc(1, sizeof *c)) || pthread_setspecific(cache_key, c)))
        no_memory(sizeof *c);
    return c;
}

void *scratch_get(size_t bytes) {
    Cache *c = this_thread();
    int best = -1;
    for (int i = 0; i < c->n; i++)
        if (c->kept[i]->cap >= bytes && (best < 0 || c->kept[i]->cap < c->kept[best]->cap))
            best = i;
    Header *h;
    if (best >= 0) {
        h = c->kept[best];
        c->kept[best] = c->kept[--c->n];
    } else {
        const size_t cap = (bytes + ALIGN - 1) / ALIGN * ALIGN;
        if (!(h = aligned_alloc(ALIGN, sizeof(Header) + (cap ? cap : ALIGN)))) no_memory(bytes);
        h->cap = cap ? cap : ALIGN;
    }
    return h + 1;
}

void scratch_put(void *p) {
    if (!p) return;
    Cache *c = this_thread();
    Header *h = (Header *)p - 1;
    if (c->n < SCRATCH_KEEP) {
        c->kept[c->n++] = h;
        return;
    }
    int smallest = 0;
    for (int i = 1; i < c->n; i++)
        if (c->kept[i]->cap < c->kept[smallest]->cap) smallest = i;
    if (c->kept[smallest]->cap < h->cap) {
        free(c->kept[smallest]);
        c->kept[smallest] = h;
    } else {
        free(h);
    }
}
