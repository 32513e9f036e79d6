/* err: how functions report failure. Every fallible function returns 0 on success or
 * a negative code and fills an Err with one human-readable line; only main prints.
 * Touches nothing else. */
#ifndef FSDP_ERR_H
#define FSDP_ERR_H

/* ERR_DIVERGED: training's loss or gradient norm stopped being a finite number; a restart from a
 * checkpoint would take the same steps to the same place, so nothing restarts on it. */
enum {
    ERR_OK = 0,
    ERR_USAGE = -2,
    ERR_IO = -3,
    ERR_NOMEM = -4,
    ERR_INTERNAL = -5,
    ERR_DIVERGED = -6
};

typedef struct Err {
    int code;
    char msg[512];
} Err;

/* Sets err (if not NULL) and returns code, so callers can write `return err_set(...)`. */
int err_set(Err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
