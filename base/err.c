/* err: err_set, the one way a failing function words what went wrong: a code and one line in the
 * caller's Err, which only main prints. */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>

int err_set(Err *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}
