/* text: a text (a file, or a folder of files, each plain or gzip'd) as a byte-level language
 * model's data set (its tokens are its bytes, vocabulary 256), cut into sequences. The bytes
 * are gathered once into a token file in a cache that every process maps read-only. */
#ifndef FSDP_IO_TEXT_H
#define FSDP_IO_TEXT_H

#include "engine/model.h" /* Dataset */

/* The fortunes package's cookies (fortunes, which .ci/deps.sh installs): 43 files, 2,576,674
 * bytes of English quotations, jokes and verse. $FSDP_TEXT, where set, is the default instead
 * (the GPU bundle carries a copy). */
#define TEXT_DEFAULT_PATH "/usr/share/games/fortunes"
/* The most bytes a text may hold: more is a data set for a tokenizer this project does not
 * have. */
#define TEXT_MAX_BYTES (1LL << 36)
/* The most files a folder may hold. */
#define TEXT_MAX_FILES 1000000

/* Where the bytes came from and where they are now. */
typedef struct TextInfo {
    long files;         /* files read */
    long skipped;       /* a folder's files left out as not text (they hold a 0 byte) */
    long long bytes;    /* tokens in all */
    int from_cache;     /* the token file was there already (this process did not build it) */
    char cache[4096];   /* the token file the data set maps; "" when read into memory */
    char why_not[4400]; /* with cache "": why no token file could be used */
} TextInfo;

/* Loads the text at path into *out: out->text its bytes, out->n = (bytes - 1) / seq sequences
 * (sample i: bytes [i * seq, (i + 1) * seq), each predicting the byte after it, so every
 * sequence has its targets in the text), out->in_elems = out->target_elems = seq,
 * out->classes 256. path is a file (any bytes, a .gz decompressed) or a folder: every regular
 * file under it (hidden names and symbolic links skipped), in byte order of their paths,
 * each decompressed if gzip'd, one after the other, leaving out a file that holds a 0 byte
 * (not text: an index, an image).
 *
 * The bytes are gathered once into a token file, text-<key>.tokens in the cache folder
 * ($FSDP_CACHE, else $XDG_CACHE_HOME/fsdp, else ~/.cache/fsdp), its key a hash of the
 * sources' paths, sizes and modification times; later loads, and every rank of a job, map
 * that file read-only, so each process's memory holds only the pages of the sequences it
 * reads. Where no token file can be written the bytes are read into memory (info says why).
 * dataset_free unmaps or frees them.
 *
 * A missing or unreadable path, corrupt gzip data (naming the file), a folder with no text
 * file, an empty text or one shorter than one sequence and its last target (seq + 1 bytes) is
 * one line naming --text and the path (ERR_USAGE); *out then holds nothing. info may be NULL. */
int text_load(Dataset *out, const char *path, int seq, TextInfo *info, Err *err);

/* The text to read: the --text flag's value if given (non-NULL, non-empty), else $FSDP_TEXT if
 * set and non-empty, else TEXT_DEFAULT_PATH. Not copied. */
const char *text_path(const char *flag_value);

#endif
