/* What the translation units of the seglog.records._scan extension share: the cursor over a
 * buffer, the zigzag varint reader, the big-endian readers and writers of the v2 batch
 * header, one record's fields up to its headers, and the functions one unit defines for
 * another (the module table in _scan.c names each unit's Python functions).
 *
 * Units: _scan_records.c (the records-section check and scan_input), _scan_append.c (the
 * leader's and follower's one-pass append: scan_append, scan_follower, index_entries,
 * write_batches), _scan_decode.c (the consumer's decode_section and decode_chunk),
 * _scan_columns.c (decode_columns, for Arrow), _scan.c (the CRC, the module table and init).
 * Everything here is static inline, so each unit compiles its own copy where it is used and
 * the per-record helpers stay inlined as they were in one file. */
#ifndef SEGLOG_SCAN_COMMON_H
#define SEGLOG_SCAN_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <limits.h>
#include <string.h>

/* Shared between the units but not exported from the shared object. */
#if defined(__GNUC__)
#define SCAN_HIDDEN __attribute__((visibility("hidden")))
#else
#define SCAN_HIDDEN
#endif

typedef struct {
    const unsigned char *p;
    Py_ssize_t pos;
    Py_ssize_t end;
} cursor;

/* Returns 0 on success, -1 when the varint is cut off or too long. Varints are
 * zigzag-encoded; a varint has at most 5 bytes, a varlong at most 10. */
static inline int read_varlong(cursor *c, Py_ssize_t limit, int max_bytes, int64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (c->pos >= limit) return -1;
        unsigned char b = c->p[c->pos++];
        raw |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* Skip a length-prefixed byte field: 0, or -1 when it is malformed. */
static inline int skip_bytes(cursor *c, Py_ssize_t limit, int64_t min_length,
                             int64_t *length) {
    if (read_varlong(c, limit, 5, length) < 0) return -1;
    if (*length < min_length) return -1;
    if (*length > 0) {
        if (*length > limit - c->pos) return -1;
        c->pos += (Py_ssize_t)*length;
    }
    return 0;
}

/* The v2 batch header, big-endian (see batch.py's HEADER), by byte position:
 *
 *     0 baseOffset int64, 8 batchLength int32, 12 partitionLeaderEpoch int32, 16 magic int8,
 *     17 crc uint32 (CRC-32C from attributes to the end), 21 attributes int16,
 *     23 lastOffsetDelta int32, 27 baseTimestamp int64, 35 maxTimestamp int64,
 *     43 producerId int64, 51 producerEpoch int16, 53 baseSequence int32, 57 recordCount int32
 *
 * and the records section from 61 on (its layout in _scan_records.c). */
#define HEADER_BYTES 61
#define LOG_OVERHEAD 12
#define MIN_BATCH_LENGTH (HEADER_BYTES - LOG_OVERHEAD)
#define COMPRESSION_MASK 0x07
#define TIMESTAMP_TYPE_MASK 0x08
#define TRANSACTIONAL_MASK 0x10
#define CONTROL_MASK 0x20

static inline int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}
static inline int16_t be16(const unsigned char *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

static inline void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}
static inline void put_be64(unsigned char *p, uint64_t v) {
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* One record's fields up to its headers (the cursor is left at the first header), checked
 * against the record's length and the offset deltas before it: 0, or -1 when malformed. */
typedef struct {
    Py_ssize_t limit; /* where the record ends */
    int64_t ts_delta, offset_delta, key_n, value_n, header_count;
    const unsigned char *key_p, *value_p;
} record_fields;

static inline int read_record(cursor *c, long last_delta, int64_t *prev_delta,
                              record_fields *r) {
    int64_t length;
    if (read_varlong(c, c->end, 5, &length) < 0 || length < 1 || length > c->end - c->pos)
        return -1;
    Py_ssize_t limit = r->limit = c->pos + (Py_ssize_t)length;
    c->pos += 1; /* attributes */
    if (read_varlong(c, limit, 10, &r->ts_delta) < 0) return -1;
    if (read_varlong(c, limit, 5, &r->offset_delta) < 0) return -1;
    if (r->offset_delta <= *prev_delta || r->offset_delta > last_delta) return -1;
    *prev_delta = r->offset_delta;
    if (read_varlong(c, limit, 5, &r->key_n) < 0 || r->key_n < -1 || r->key_n > limit - c->pos)
        return -1;
    r->key_p = c->p + c->pos;
    if (r->key_n > 0) c->pos += (Py_ssize_t)r->key_n;
    if (read_varlong(c, limit, 5, &r->value_n) < 0 || r->value_n < -1 ||
        r->value_n > limit - c->pos)
        return -1;
    r->value_p = c->p + c->pos;
    if (r->value_n > 0) c->pos += (Py_ssize_t)r->value_n;
    if (read_varlong(c, limit, 5, &r->header_count) < 0 || r->header_count < 0 ||
        r->header_count > limit - c->pos)
        return -1;
    return 0;
}

/* The CRC-32C of a v2 batch from its attributes to its end (_scan.c: the one unit that
 * holds _crc32c.h's tables, which crc32c_init fills at import). */
SCAN_HIDDEN uint32_t batch_crc(const unsigned char *h, Py_ssize_t size);

/* _scan_records.c: walk one records section; NULL when it is whole, else what is wrong (a
 * record count problem as the string itself, which scan_records compares by address). */
SCAN_HIDDEN const char *scan_section(const unsigned char *buf, Py_ssize_t len, long record_count,
                                     int require_keys, int64_t *min_delta, int64_t *max_delta,
                                     long *index_out, Py_ssize_t *record_start);

/* The Python functions, one unit each, named in _scan.c's module table. */
SCAN_HIDDEN PyObject *scan_records(PyObject *self, PyObject *args);
SCAN_HIDDEN PyObject *scan_input(PyObject *self, PyObject *args);
SCAN_HIDDEN PyObject *scan_append(PyObject *self, PyObject *args);
SCAN_HIDDEN PyObject *scan_follower(PyObject *self, PyObject *args);
SCAN_HIDDEN PyObject *index_entries(PyObject *self, PyObject *args);
SCAN_HIDDEN PyObject *write_batches(PyObject *self, PyObject *args);
SCAN_HIDDEN PyObject *decode_section(PyObject *self, PyObject *args);
SCAN_HIDDEN PyObject *decode_chunk(PyObject *self, PyObject *args);
SCAN_HIDDEN PyObject *decode_columns(PyObject *self, PyObject *args);

#endif
