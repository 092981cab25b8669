/* Structural check of a RecordBatch v2 records section, in one pass and without creating a
 * Python object per record: the storage node validates every appended batch inside, as
 * Kafka's LogValidator does, and a Python loop over records would cost ~0.5 us each.
 *
 * Layout of one record (see record.py for the Python decoder of the same bytes):
 *
 *     length          varint   bytes after this field
 *     attributes      int8
 *     timestampDelta  varlong
 *     offsetDelta     varint   must be the record's index (a producer's batch has no gaps)
 *     keyLength       varint   -1 for a null key
 *     key             bytes
 *     valueLength     varint   -1 for a null value
 *     value           bytes
 *     headerCount     varint   >= 0
 *     headers         [keyLength varint >= 0, key, valueLength varint >= -1, value]
 *
 * Varints are zigzag-encoded; a varint has at most 5 bytes, a varlong at most 10.
 *
 * scan_records(section, record_count, require_keys) -> (min_timestamp_delta,
 *     max_timestamp_delta)
 * raises ValueError naming the record, its position and what is wrong: fields running past
 * the record's length, a record not ending where its length says, non-sequential offset
 * deltas, a null key when keys are required, a count other than record_count, or bytes
 * left over after the last record.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <limits.h>
#include <string.h>

#include "_crc32c.h"

typedef struct {
    const unsigned char *p;
    Py_ssize_t pos;
    Py_ssize_t end;
} cursor;

/* Returns 0 on success, -1 when the varint is cut off or too long. */
static int read_varlong(cursor *c, Py_ssize_t limit, int max_bytes, int64_t *out) {
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

static PyObject *fail(long index, Py_ssize_t position, const char *what) {
    PyErr_Format(PyExc_ValueError, "record %ld at position %zd: %s", index, position, what);
    return NULL;
}

/* Skip a length-prefixed byte field: 0, or -1 when it is malformed. */
static int skip_bytes(cursor *c, Py_ssize_t limit, int64_t min_length, int64_t *length) {
    if (read_varlong(c, limit, 5, length) < 0) return -1;
    if (*length < min_length) return -1;
    if (*length > 0) {
        if (*length > limit - c->pos) return -1;
        c->pos += (Py_ssize_t)*length;
    }
    return 0;
}

static const char RECORD_COUNT_PROBLEM[] = "record count";

/* Walk one records section; NULL when it is whole, else what is wrong (with the record's
 * index and start position in *index / *record_start). */
static const char *scan_section(const unsigned char *buf, Py_ssize_t len, long record_count,
                                int require_keys, int64_t *min_delta, int64_t *max_delta,
                                long *index_out, Py_ssize_t *record_start) {
    cursor c = {buf, 0, len};
    long index = 0;
    *min_delta = INT64_MAX;
    *max_delta = INT64_MIN;
    const char *problem = NULL;
    while (c.pos < c.end) {
        int64_t length, value;
        *record_start = c.pos;
        if (index >= record_count) { problem = "more records than recordCount"; break; }
        if (read_varlong(&c, c.end, 5, &length) < 0) { problem = "bad length varint"; break; }
        if (length < 1 || length > c.end - c.pos) {
            problem = "length runs past the records section"; break;
        }
        Py_ssize_t limit = c.pos + (Py_ssize_t)length;
        c.pos += 1; /* attributes */
        if (read_varlong(&c, limit, 10, &value) < 0) {
            problem = "bad timestampDelta varlong"; break;
        }
        if (value < *min_delta) *min_delta = value;
        if (value > *max_delta) *max_delta = value;
        if (read_varlong(&c, limit, 5, &value) < 0) { problem = "bad offsetDelta varint"; break; }
        if (value != index) { problem = "offsetDelta is not the record's index"; break; }
        if (skip_bytes(&c, limit, -1, &value) < 0) { problem = "bad key length"; break; }
        if (value < 0 && require_keys) {
            problem = "null key on a compacted topic (every record needs a key)"; break;
        }
        if (skip_bytes(&c, limit, -1, &value) < 0) { problem = "bad value length"; break; }
        int64_t headers;
        if (read_varlong(&c, limit, 5, &headers) < 0 || headers < 0) {
            problem = "bad header count"; break;
        }
        int64_t h = 0;
        for (; h < headers; h++) {
            if (skip_bytes(&c, limit, 0, &value) < 0) break;
            if (skip_bytes(&c, limit, -1, &value) < 0) break;
        }
        if (h < headers) { problem = "bad header"; break; }
        if (c.pos != limit) { problem = "fields do not end where the length says"; break; }
        index++;
    }
    *index_out = index;
    if (problem == NULL && index != record_count) problem = RECORD_COUNT_PROBLEM;
    if (index == 0) *min_delta = *max_delta = 0;
    return problem;
}

static PyObject *scan_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    long record_count;
    int require_keys;
    if (!PyArg_ParseTuple(args, "y*lp", &view, &record_count, &require_keys)) return NULL;
    int64_t min_delta, max_delta;
    long index;
    Py_ssize_t record_start = 0;
    const char *problem = scan_section((const unsigned char *)view.buf, view.len, record_count,
                                       require_keys, &min_delta, &max_delta, &index,
                                       &record_start);
    PyObject *result = NULL;
    if (problem == NULL) {
        result = Py_BuildValue("(LL)", (long long)min_delta, (long long)max_delta);
    } else if (problem == RECORD_COUNT_PROBLEM) {
        PyErr_Format(PyExc_ValueError, "records section holds %ld records, recordCount says %ld",
                     index, record_count);
    } else {
        fail(index, record_start, problem);
    }
    PyBuffer_Release(&view);
    return result;
}

/* The v2 batch header, big-endian (see batch.py's HEADER). */
#define HEADER_BYTES 61
#define LOG_OVERHEAD 12
#define MIN_BATCH_LENGTH (HEADER_BYTES - LOG_OVERHEAD)
#define COMPRESSION_MASK 0x07
#define TIMESTAMP_TYPE_MASK 0x08
#define CONTROL_MASK 0x20

static int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}
static int16_t be16(const unsigned char *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

/* scan_input(view, header_class, max_message_bytes, max_codec, check_timestamps, earliest,
 *            latest, require_keys) -> (batches, slow, stop)
 *
 * The storage node's append checks for a whole input in one call, except the CRC (the caller
 * checks it with the crc32c library): per v2 batch the header's lengths, size limit,
 * recordCount against lastOffsetDelta, codec, the timestamp window (CreateTime, data
 * batches), and, for uncompressed CreateTime data batches, the records section walked with
 * the header's timestamps agreeing with the records'. `batches` holds (position, header) for
 * each batch that passed, built as `header_class` (a tuple subclass); `slow` the indexes in
 * `batches` of compressed, control or LogAppendTime batches, whose inside the caller checks;
 * `stop` the position of the first batch that is not v2 or failed a check (the input's
 * length when none did), which the caller examines to name the problem. */
static PyObject *scan_input(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *header_class;
    long long max_message_bytes, earliest, latest;
    int max_codec, check_timestamps, require_keys;
    if (!PyArg_ParseTuple(args, "y*OLipLLp", &view, &header_class, &max_message_bytes,
                          &max_codec, &check_timestamps, &earliest, &latest, &require_keys))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t total = view.len, pos = 0;
    PyObject *batches = PyList_New(0), *slow = PyList_New(0), *result = NULL;
    if (batches == NULL || slow == NULL) goto done;
    if (!PyType_Check(header_class) ||
        !PyType_IsSubtype((PyTypeObject *)header_class, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "header_class must be a tuple subclass");
        goto done;
    }
    while (pos < total) {
        if (total - pos < HEADER_BYTES || buf[pos + 16] != 2) break;
        const unsigned char *h = buf + pos;
        int64_t base_offset = be64(h);
        int32_t batch_length = be32(h + 8);
        int32_t leader_epoch = be32(h + 12);
        uint32_t crc = (uint32_t)be32(h + 17);
        int16_t attributes = be16(h + 21);
        int32_t last_offset_delta = be32(h + 23);
        int64_t base_ts = be64(h + 27);
        int64_t max_ts = be64(h + 35);
        int64_t producer_id = be64(h + 43);
        int16_t producer_epoch = be16(h + 51);
        int32_t base_sequence = be32(h + 53);
        int32_t count = be32(h + 57);
        Py_ssize_t size = (Py_ssize_t)batch_length + LOG_OVERHEAD;
        if (batch_length < MIN_BATCH_LENGTH || size > total - pos || size > max_message_bytes ||
            count <= 0 || (int64_t)count != (int64_t)last_offset_delta + 1 ||
            (attributes & COMPRESSION_MASK) > max_codec)
            break;
        int control = attributes & CONTROL_MASK;
        if (check_timestamps && !control &&
            !(earliest <= base_ts && base_ts <= latest && earliest <= max_ts && max_ts <= latest))
            break;
        int is_slow = (attributes & (COMPRESSION_MASK | CONTROL_MASK | TIMESTAMP_TYPE_MASK)) != 0;
        if (!is_slow) {
            int64_t low, high;
            long index;
            Py_ssize_t record_start;
            if (scan_section(h + HEADER_BYTES, size - HEADER_BYTES, count, require_keys, &low,
                             &high, &index, &record_start) != NULL)
                break;
            if (max_ts < base_ts) break;
            if (check_timestamps && (base_ts + high != max_ts || base_ts + low < earliest)) break;
        }
        PyObject *fields = Py_BuildValue("(LiibkhiLLLhii)", (long long)base_offset, batch_length,
                                         leader_epoch, 2, (unsigned long)crc, attributes,
                                         last_offset_delta, (long long)base_ts,
                                         (long long)max_ts, (long long)producer_id,
                                         producer_epoch, base_sequence, count);
        if (fields == NULL) goto done;
        /* tuple.__new__(header_class, fields): the NamedTuple without its Python __new__. */
        PyObject *new_args = PyTuple_Pack(1, fields);
        Py_DECREF(fields);
        if (new_args == NULL) goto done;
        PyObject *header = PyTuple_Type.tp_new((PyTypeObject *)header_class, new_args, NULL);
        Py_DECREF(new_args);
        if (header == NULL) goto done;
        PyObject *entry = Py_BuildValue("(nN)", pos, header);
        if (entry == NULL) goto done;
        int failed = PyList_Append(batches, entry);
        Py_DECREF(entry);
        if (failed < 0) goto done;
        if (is_slow) {
            PyObject *at = PyLong_FromSsize_t(PyList_GET_SIZE(batches) - 1);
            if (at == NULL || PyList_Append(slow, at) < 0) { Py_XDECREF(at); goto done; }
            Py_DECREF(at);
        }
        pos += size;
    }
    result = Py_BuildValue("(OOn)", batches, slow, pos);
done:
    Py_XDECREF(batches);
    Py_XDECREF(slow);
    PyBuffer_Release(&view);
    return result;
}

/* ---- The append path in one pass (scan_append, scan_follower, index_entries,
 * write_batches) -------------------------------------------------------------------------
 *
 * A scan leaves, per batch that passed, one fixed-size entry in a bytes "table" (native
 * byte order, struct format "=qqqiiihh", 40 bytes; validation.py reads it only off the hot
 * path, when a batch's header is wanted in Python):
 *
 *     position     int64  where the batch starts in the input
 *     base_offset  int64  as the input says (the follower keeps it; the leader replaces it)
 *     max_ts       int64  the header's maxTimestamp
 *     size         int32  batchLength + 12
 *     last_delta   int32  lastOffsetDelta
 *     epoch        int32  partitionLeaderEpoch
 *     attributes   int16
 *     flags        int16  1: producerId >= 0 (idempotent or transactional)
 *
 * so the leader's and the follower's appends make no Python object per batch: the CRC is
 * checked here, the offsets are written into each batch's prefix by write_batches (with the
 * batch's bytes, in one pwritev), and the sparse index entries are computed in one call
 * (index_entries) and written in bulk. */
#define ENTRY_BYTES 40
#define ENTRY_PRODUCER 1
typedef struct {
    int64_t pos, base_offset, max_ts;
    int32_t size, last_delta, epoch;
    int16_t attributes, flags;
} batch_entry;

/* A growing table: doubled as needed, handed to Python as a bytes object at the end. */
typedef struct {
    char *data;
    Py_ssize_t used, capacity;
} table_buf;

static int table_add(table_buf *t, const batch_entry *e) {
    if (t->used + ENTRY_BYTES > t->capacity) {
        Py_ssize_t want = t->capacity ? t->capacity * 2 : 64 * ENTRY_BYTES;
        char *grown = PyMem_Realloc(t->data, (size_t)want);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->data = grown;
        t->capacity = want;
    }
    memcpy(t->data + t->used, e, ENTRY_BYTES);
    t->used += ENTRY_BYTES;
    return 0;
}

static int codec_known(int attributes, int max_codec) {
    return (attributes & COMPRESSION_MASK) <= max_codec;
}

static uint32_t batch_crc(const unsigned char *h, Py_ssize_t size) {
    return crc32c_of(h + 21, (size_t)(size - 21), 0); /* from attributes to the end */
}

/* scan_append(view, max_message_bytes, max_codec, check_timestamps, earliest, latest,
 *             require_keys) -> (table, slow, stop, offsets, max_timestamp, flags)
 *
 * scan_input's checks and the CRC of every batch, stopping at the first batch that is not
 * v2 or fails one (`stop`: its position; the input's length when none did). `slow`: the
 * positions of compressed, control and LogAppendTime batches, whose inside the caller
 * checks. `offsets`: the records the table's batches hold; `max_timestamp` their largest
 * maxTimestamp (-1 when none); `flags` 1 when a batch has a producer id, 2 when the
 * batches' partitionLeaderEpochs are not all the same. */
static PyObject *scan_append(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long max_message_bytes, earliest, latest;
    int max_codec, check_timestamps, require_keys;
    if (!PyArg_ParseTuple(args, "y*LipLLp", &view, &max_message_bytes, &max_codec,
                          &check_timestamps, &earliest, &latest, &require_keys))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t total = view.len, pos = 0;
    table_buf table = {NULL, 0, 0};
    PyObject *slow = PyList_New(0), *result = NULL;
    long long offsets = 0, max_timestamp = -1;
    int flags = 0;
    int32_t first_epoch = 0;
    if (slow == NULL) goto done;
    while (pos < total) {
        if (total - pos < HEADER_BYTES || buf[pos + 16] != 2) break;
        const unsigned char *h = buf + pos;
        int32_t batch_length = be32(h + 8);
        int16_t attributes = be16(h + 21);
        int32_t last_offset_delta = be32(h + 23);
        int64_t base_ts = be64(h + 27);
        int64_t max_ts = be64(h + 35);
        int32_t count = be32(h + 57);
        Py_ssize_t size = (Py_ssize_t)batch_length + LOG_OVERHEAD;
        if (batch_length < MIN_BATCH_LENGTH || size > total - pos || size > max_message_bytes ||
            count <= 0 || (int64_t)count != (int64_t)last_offset_delta + 1 ||
            !codec_known(attributes, max_codec))
            break;
        int control = attributes & CONTROL_MASK;
        if (check_timestamps && !control &&
            !(earliest <= base_ts && base_ts <= latest && earliest <= max_ts && max_ts <= latest))
            break;
        int is_slow = (attributes & (COMPRESSION_MASK | CONTROL_MASK | TIMESTAMP_TYPE_MASK)) != 0;
        if (!is_slow) {
            int64_t low, high;
            long index;
            Py_ssize_t record_start;
            if (scan_section(h + HEADER_BYTES, size - HEADER_BYTES, count, require_keys, &low,
                             &high, &index, &record_start) != NULL)
                break;
            if (max_ts < base_ts) break;
            if (check_timestamps && (base_ts + high != max_ts || base_ts + low < earliest)) break;
        }
        if (batch_crc(h, size) != (uint32_t)be32(h + 17)) break;
        batch_entry e = {pos, be64(h), max_ts, (int32_t)size, last_offset_delta, be32(h + 12),
                         attributes, be64(h + 43) >= 0 ? ENTRY_PRODUCER : 0};
        if (table_add(&table, &e) < 0) goto done;
        if (e.flags & ENTRY_PRODUCER) flags |= 1;
        if (table.used == ENTRY_BYTES) first_epoch = e.epoch;
        else if (e.epoch != first_epoch) flags |= 2;
        offsets += count;
        if (max_ts > max_timestamp) max_timestamp = max_ts;
        if (is_slow) {
            PyObject *at = PyLong_FromSsize_t(pos);
            if (at == NULL || PyList_Append(slow, at) < 0) {
                Py_XDECREF(at);
                goto done;
            }
            Py_DECREF(at);
        }
        pos += size;
    }
    result = Py_BuildValue("(y#OnLLi)", table.data ? table.data : "", table.used, slow, pos,
                           offsets, max_timestamp, flags);
done:
    PyMem_Free(table.data);
    Py_XDECREF(slow);
    PyBuffer_Release(&view);
    return result;
}

/* scan_follower(view, next_offset, gaps_allowed, max_codec)
 *     -> (table, stop, max_timestamp, flags)
 *
 * A follower's check of the leader's bytes (validation.validate_follower_records names the
 * problem): whole v2 batches, header lengths, codec, recordCount against lastOffsetDelta,
 * the CRC, base offsets from `next_offset` on and increasing, with no gap unless
 * `gaps_allowed`. Stops at the first batch that fails; `flags` as scan_append's;
 * `max_timestamp` the batches' largest maxTimestamp (INT64_MIN when there are none). */
static PyObject *scan_follower(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long expected;
    int gaps_allowed, max_codec;
    if (!PyArg_ParseTuple(args, "y*Lpi", &view, &expected, &gaps_allowed, &max_codec))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t total = view.len, pos = 0;
    table_buf table = {NULL, 0, 0};
    PyObject *result = NULL;
    long long max_timestamp = INT64_MIN; /* the largest of the batches', whatever they are */
    int flags = 0;
    int32_t first_epoch = 0;
    while (pos < total) {
        if (total - pos < HEADER_BYTES || buf[pos + 16] != 2) break;
        const unsigned char *h = buf + pos;
        int64_t base_offset = be64(h);
        int32_t batch_length = be32(h + 8);
        int16_t attributes = be16(h + 21);
        int32_t last_offset_delta = be32(h + 23);
        int32_t count = be32(h + 57);
        Py_ssize_t size = (Py_ssize_t)batch_length + LOG_OVERHEAD;
        if (batch_length < MIN_BATCH_LENGTH || size > total - pos || count <= 0 ||
            last_offset_delta < 0 || (int64_t)count != (int64_t)last_offset_delta + 1 ||
            !codec_known(attributes, max_codec) || base_offset < expected ||
            (base_offset > expected && !gaps_allowed) ||
            base_offset > INT64_MAX - last_offset_delta - 1)
            break;
        if (batch_crc(h, size) != (uint32_t)be32(h + 17)) break;
        int64_t max_ts = be64(h + 35);
        batch_entry e = {pos, base_offset, max_ts, (int32_t)size, last_offset_delta,
                         be32(h + 12), attributes, be64(h + 43) >= 0 ? ENTRY_PRODUCER : 0};
        if (table_add(&table, &e) < 0) goto done;
        if (e.flags & ENTRY_PRODUCER) flags |= 1;
        if (table.used == ENTRY_BYTES) first_epoch = e.epoch;
        else if (e.epoch != first_epoch) flags |= 2;
        if (max_ts > max_timestamp) max_timestamp = max_ts;
        expected = base_offset + last_offset_delta + 1;
        pos += size;
    }
    result = Py_BuildValue("(y#nLi)", table.data ? table.data : "", table.used, pos,
                           max_timestamp, flags);
done:
    PyMem_Free(table.data);
    PyBuffer_Release(&view);
    return result;
}

/* index_entries(table, first_offset, segment_base, position, since_last_entry, interval,
 *               max_timestamp, offset_of_max_timestamp, last_time_entry_ms, room)
 *     -> (offset_entries, time_entries, since_last_entry, max_timestamp,
 *         offset_of_max_timestamp)
 *
 * Kafka's LogSegment.append bookkeeping for the table's batches written from `position` on
 * (segment.py's _index_batches does the same per AppendedBatch): an offset-index entry (the
 * batch's last offset, its position) and a time-index candidate (the largest timestamp so
 * far, its offset) for each batch that starts after more than `interval` bytes since the
 * last entry, at most `room` of them. The entries come back in their files' formats,
 * big-endian, relative to `segment_base`: offset index ">ii" (offset, position), time index
 * ">qi" (timestamp, offset), the latter only where the timestamp grows past
 * `last_time_entry_ms` (TimeIndex keeps no other). `first_offset` >= 0: the batches get
 * offsets from it on (the leader); -1: they keep theirs (the follower). ValueError when an
 * entry does not fit its 4-byte fields (a caller that rolls as it should never sees it). */
static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}
static void put_be64(unsigned char *p, uint64_t v) {
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

static PyObject *index_entries(PyObject *self, PyObject *args) {
    Py_buffer table;
    long long first_offset, base, position, since, interval, max_ts, offset_of_max, last_time;
    Py_ssize_t room;
    if (!PyArg_ParseTuple(args, "y*LLLLLLLLn", &table, &first_offset, &base, &position, &since,
                          &interval, &max_ts, &offset_of_max, &last_time, &room))
        return NULL;
    Py_ssize_t batches = table.len / ENTRY_BYTES;
    Py_ssize_t most = batches < room ? batches : room;
    if (most < 0) most = 0;
    PyObject *offset_bytes = PyBytes_FromStringAndSize(NULL, most * 8);
    PyObject *time_bytes = PyBytes_FromStringAndSize(NULL, most * 12);
    PyObject *result = NULL;
    if (offset_bytes == NULL || time_bytes == NULL) goto done;
    unsigned char *op = (unsigned char *)PyBytes_AS_STRING(offset_bytes);
    unsigned char *tp = (unsigned char *)PyBytes_AS_STRING(time_bytes);
    Py_ssize_t offset_n = 0, time_n = 0;
    long long next_offset = first_offset;
    for (Py_ssize_t i = 0; i < batches; i++) {
        batch_entry e;
        memcpy(&e, (const char *)table.buf + i * ENTRY_BYTES, ENTRY_BYTES);
        long long last_offset =
            (first_offset >= 0 ? next_offset : e.base_offset) + (long long)e.last_delta;
        next_offset = last_offset + 1;
        if (e.max_ts > max_ts) {
            max_ts = e.max_ts;
            offset_of_max = last_offset;
        }
        if (since > interval && offset_n < room) {
            long long relative = last_offset - base, time_relative = offset_of_max - base;
            if (relative < 0 || relative > 0x7FFFFFFF || position < 0 || position > 0x7FFFFFFF ||
                time_relative < 0 || time_relative > 0x7FFFFFFF) {
                PyErr_Format(PyExc_ValueError,
                             "index entry (offset %lld, position %lld) does not fit a segment "
                             "with base offset %lld",
                             last_offset, position, base);
                goto done;
            }
            put_be32(op + offset_n * 8, (uint32_t)relative);
            put_be32(op + offset_n * 8 + 4, (uint32_t)position);
            offset_n++;
            if (max_ts > last_time) {
                put_be64(tp + time_n * 12, (uint64_t)max_ts);
                put_be32(tp + time_n * 12 + 8, (uint32_t)time_relative);
                time_n++;
                last_time = max_ts;
            }
            since = 0;
        }
        since += e.size;
        position += e.size;
    }
    if (_PyBytes_Resize(&offset_bytes, offset_n * 8) < 0 ||
        _PyBytes_Resize(&time_bytes, time_n * 12) < 0)
        goto done;
    result = Py_BuildValue("(OOLLL)", offset_bytes, time_bytes, since, max_ts, offset_of_max);
done:
    Py_XDECREF(offset_bytes);
    Py_XDECREF(time_bytes);
    PyBuffer_Release(&table);
    return result;
}

/* write_batches(fd, file_position, view, table, first_offset, leader_epoch) -> bytes written
 *
 * The leader's write of validated batches at `file_position`, offsets assigned on the way:
 * each batch goes out as a 16-byte prefix built here (baseOffset from `first_offset` on, its
 * batchLength, `leader_epoch` or, when None, its own partitionLeaderEpoch: none of them
 * under the CRC) and the rest of its bytes from `view`, uncopied, in pwritev calls of up to
 * 1000 buffers (IOV_MAX is 1024), without the GIL; a short write is finished. OSError as
 * the system call raised it (the caller cuts the file back). */
#include <errno.h>
#include <sys/uio.h>
#define WRITE_IOV 1000

static PyObject *write_batches(PyObject *self, PyObject *args) {
    int fd;
    long long file_position, first_offset;
    Py_buffer view, table;
    PyObject *epoch_arg;
    if (!PyArg_ParseTuple(args, "iLy*y*LO", &fd, &file_position, &view, &table, &first_offset,
                          &epoch_arg))
        return NULL;
    long epoch = 0;
    int keep_epochs = epoch_arg == Py_None;
    if (!keep_epochs) epoch = PyLong_AsLong(epoch_arg);
    PyObject *result = NULL;
    Py_ssize_t batches = table.len / ENTRY_BYTES;
    unsigned char *prefixes = PyMem_Malloc((size_t)(batches ? batches : 1) * 16);
    struct iovec *iov = PyMem_Malloc(sizeof(struct iovec) * WRITE_IOV);
    if (PyErr_Occurred()) goto done;
    if (prefixes == NULL || iov == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const unsigned char *data = (const unsigned char *)view.buf;
    long long next_offset = first_offset, written = 0;
    int error = 0;
    for (Py_ssize_t i = 0; i < batches; i++) {
        batch_entry e;
        memcpy(&e, (const char *)table.buf + i * ENTRY_BYTES, ENTRY_BYTES);
        if (e.pos < 0 || e.size < HEADER_BYTES || e.pos > view.len - e.size) {
            PyErr_SetString(PyExc_ValueError, "table does not match the input");
            goto done;
        }
        put_be64(prefixes + i * 16, (uint64_t)next_offset);
        put_be32(prefixes + i * 16 + 8, (uint32_t)(e.size - LOG_OVERHEAD));
        put_be32(prefixes + i * 16 + 12, (uint32_t)(keep_epochs ? e.epoch : (int32_t)epoch));
        next_offset += (long long)e.last_delta + 1;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t first = 0; first < batches && !error; first += WRITE_IOV / 2) {
        Py_ssize_t n = batches - first < WRITE_IOV / 2 ? batches - first : WRITE_IOV / 2;
        int count = 0;
        for (Py_ssize_t i = first; i < first + n; i++) {
            batch_entry e;
            memcpy(&e, (const char *)table.buf + i * ENTRY_BYTES, ENTRY_BYTES);
            iov[count].iov_base = prefixes + i * 16;
            iov[count++].iov_len = 16;
            iov[count].iov_base = (void *)(data + e.pos + 16);
            iov[count++].iov_len = (size_t)e.size - 16;
        }
        struct iovec *at = iov;
        while (count > 0) {
            ssize_t done_now = pwritev(fd, at, count, (off_t)(file_position + written));
            if (done_now < 0) {
                if (errno == EINTR) continue;
                error = errno;
                break;
            }
            if (done_now == 0) {
                error = EIO;
                break;
            }
            written += done_now;
            /* Skip the buffers written whole; a partly written one continues where it
             * stopped. */
            while (count > 0 && (size_t)done_now >= at->iov_len) {
                done_now -= (ssize_t)at->iov_len;
                at++;
                count--;
            }
            if (count > 0 && done_now > 0) {
                at->iov_base = (char *)at->iov_base + done_now;
                at->iov_len -= (size_t)done_now;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (error) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = PyLong_FromLongLong(written);
done:
    PyMem_Free(prefixes);
    PyMem_Free(iov);
    PyBuffer_Release(&view);
    PyBuffer_Release(&table);
    return result;
}

/* crc32c(data, force_software=False) -> int: the CRC above, for tests against the crc32c
 * library. */
static PyObject *crc32c_py(PyObject *self, PyObject *args) {
    Py_buffer view;
    int force_software = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &view, &force_software)) return NULL;
    uint32_t crc = crc32c_of((const unsigned char *)view.buf, (size_t)view.len, force_software);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* One record's fields up to its headers (the cursor is left at the first header), checked
 * against the record's length and the offset deltas before it: 0, or -1 when malformed. */
typedef struct {
    Py_ssize_t limit; /* where the record ends */
    int64_t ts_delta, offset_delta, key_n, value_n, header_count;
    const unsigned char *key_p, *value_p;
} record_fields;

static int read_record(cursor *c, long last_delta, int64_t *prev_delta, record_fields *r) {
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

/* decode_section(section, record_class, base_offset, base_timestamp, record_count,
 *                last_offset_delta, topic, partition, timestamp_type, stamp)
 *     -> list[record_class]
 *
 * The consumer's decoder of an (uncompressed or decompressed) records section: one
 * `record_class` tuple per record (offset, timestamp_ms, key, value, headers, topic,
 * partition, timestamp_type), headers a tuple of (str key, bytes-or-None value). With
 * `stamp` >= 0 (a LogAppendTime batch) every record carries that timestamp. Any problem
 * raises ValueError without a detailed message: the caller decodes again in Python to name
 * it (record.py's decode_records, whose checks this mirrors). */
static PyObject *bytes_or_none(const unsigned char *p, int64_t n) {
    if (n < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)n);
}

/* Headers repeat from record to record (the same few names in the same order, often with
 * the same values: a source, a content type): the key and the (key, value) pair decoded at
 * each position are kept and reused when the next record's bytes match them, and so is the
 * whole headers tuple when every pair was reused. Tuples are immutable, so sharing them
 * changes nothing a caller can see. */
#define KEY_CACHE_SLOTS 8
typedef struct {
    PyObject *keys[KEY_CACHE_SLOTS];
    PyObject *pairs[KEY_CACHE_SLOTS];
    PyObject *last_headers;
} key_cache;

static void clear_cache(key_cache *cache) {
    for (int slot = 0; slot < KEY_CACHE_SLOTS; slot++) {
        Py_CLEAR(cache->keys[slot]);
        Py_CLEAR(cache->pairs[slot]);
    }
    Py_CLEAR(cache->last_headers);
}

static int same_utf8(PyObject *str, const unsigned char *p, int64_t n) {
    Py_ssize_t size;
    const char *cached = PyUnicode_AsUTF8AndSize(str, &size);
    if (cached == NULL) {
        PyErr_Clear();
        return 0;
    }
    return size == n && memcmp(cached, p, (size_t)n) == 0;
}

static int same_value(PyObject *value, const unsigned char *p, int64_t n) {
    if (n < 0) return value == Py_None;
    return value != Py_None && PyBytes_GET_SIZE(value) == n &&
           memcmp(PyBytes_AS_STRING(value), p, (size_t)n) == 0;
}

static PyObject *header_key(key_cache *cache, int64_t i, const unsigned char *p, int64_t n) {
    if (i < KEY_CACHE_SLOTS && cache->keys[i] != NULL && same_utf8(cache->keys[i], p, n)) {
        Py_INCREF(cache->keys[i]);
        return cache->keys[i];
    }
    PyObject *key = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)n, NULL);
    if (key != NULL && i < KEY_CACHE_SLOTS) {
        Py_XDECREF(cache->keys[i]);
        Py_INCREF(key);
        cache->keys[i] = key;
    }
    return key;
}

static PyObject *header_pair(key_cache *cache, int64_t i, const unsigned char *key_p,
                             int64_t key_n, const unsigned char *value_p, int64_t value_n) {
    PyObject *cached = i < KEY_CACHE_SLOTS ? cache->pairs[i] : NULL;
    if (cached != NULL && same_value(PyTuple_GET_ITEM(cached, 1), value_p, value_n) &&
        same_utf8(PyTuple_GET_ITEM(cached, 0), key_p, key_n)) {
        Py_INCREF(cached);
        return cached;
    }
    PyObject *key = header_key(cache, i, key_p, key_n);
    if (key == NULL) return NULL;
    PyObject *value = bytes_or_none(value_p, value_n);
    PyObject *pair = value == NULL ? NULL : PyTuple_Pack(2, key, value);
    Py_DECREF(key);
    Py_XDECREF(value);
    if (pair == NULL) return NULL;
    /* A str and a bytes (or None) can hold no reference cycle: the collector need not
     * visit the pair (CPython untracks such tuples itself, at its next collection). */
    PyObject_GC_UnTrack(pair);
    if (i < KEY_CACHE_SLOTS) {
        Py_XDECREF(cache->pairs[i]);
        Py_INCREF(pair);
        cache->pairs[i] = pair;
    }
    return pair;
}

static PyObject *decode_headers(cursor *c, Py_ssize_t limit, int64_t count, key_cache *cache) {
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL || count == 0) return headers;
    int reused = 1;
    for (int64_t i = 0; i < count; i++) {
        int64_t key_n, value_n;
        if (read_varlong(c, limit, 5, &key_n) < 0 || key_n < 0 || key_n > limit - c->pos)
            goto bad;
        const unsigned char *key_p = c->p + c->pos;
        c->pos += (Py_ssize_t)key_n;
        if (read_varlong(c, limit, 5, &value_n) < 0 || value_n < -1 ||
            value_n > limit - c->pos)
            goto bad;
        const unsigned char *value_p = c->p + c->pos;
        if (value_n > 0) c->pos += (Py_ssize_t)value_n;
        PyObject *pair = header_pair(cache, i, key_p, key_n, value_p, value_n);
        if (pair == NULL) goto bad;
        PyObject *last = cache->last_headers;
        if (reused && !(last != NULL && PyTuple_GET_SIZE(last) == count &&
                        PyTuple_GET_ITEM(last, i) == pair))
            reused = 0;
        PyTuple_SET_ITEM(headers, (Py_ssize_t)i, pair);
    }
    if (reused) {
        Py_DECREF(headers);
        Py_INCREF(cache->last_headers);
        return cache->last_headers;
    }
    PyObject_GC_UnTrack(headers); /* untracked pairs only: no cycle through it */
    Py_XDECREF(cache->last_headers);
    Py_INCREF(headers);
    cache->last_headers = headers;
    return headers;
bad:
    Py_DECREF(headers);
    return NULL;
}

/* The records of one section appended to `out` as `record_class` tuples, those with an
 * offset below `min_offset` skipped: 0, or -1 when the section does not decode (`out` may
 * then hold some of its records: the caller cuts them; an exception may be set). */
static int decode_into(PyObject *out, const unsigned char *buf, Py_ssize_t len,
                       PyObject *record_class, long long base_offset, long long base_ts,
                       long record_count, long last_delta, PyObject *topic,
                       PyObject *partition, PyObject *timestamp_type, long long stamp,
                       long long min_offset, key_cache *cache) {
    /* A tuple subclass without fields of its own (a NamedTuple: __slots__ = ()) is
     * allocated directly; anything else goes through tuple.__new__. */
    PyTypeObject *record_type = (PyTypeObject *)record_class;
    int direct = record_type->tp_basicsize == PyTuple_Type.tp_basicsize &&
                 record_type->tp_itemsize == PyTuple_Type.tp_itemsize &&
                 record_type->tp_dictoffset == 0 && record_type->tp_alloc == PyType_GenericAlloc;
    int plain_fields = PyUnicode_CheckExact(topic) && PyLong_CheckExact(partition) &&
                       PyLong_CheckExact(timestamp_type);
    if (record_count < 0 || record_count > len) return -1;
    cursor c = {buf, 0, len};
    int64_t prev_delta = -1;
    for (long i = 0; i < record_count; i++) {
        record_fields r;
        if (read_record(&c, last_delta, &prev_delta, &r) < 0) return -1;
        PyObject *headers = decode_headers(&c, r.limit, r.header_count, cache);
        if (headers == NULL) return -1;
        if (c.pos != r.limit) {
            Py_DECREF(headers);
            return -1;
        }
        if (base_offset + r.offset_delta < min_offset) {
            Py_DECREF(headers);
            continue;
        }
        /* The record tuple itself, allocated as record_class and filled in place: the
         * class adds nothing to a tuple (checked above), so this is what tuple.__new__
         * would build, without the two tuples it copies from. */
        PyObject *fields = direct ? PyType_GenericAlloc((PyTypeObject *)record_class, 8)
                                  : PyTuple_New(8);
        if (fields == NULL) {
            Py_DECREF(headers);
            return -1;
        }
        PyObject *key = bytes_or_none(r.key_p, r.key_n);
        PyObject *value = bytes_or_none(r.value_p, r.value_n);
        PyTuple_SET_ITEM(fields, 0, PyLong_FromLongLong(base_offset + r.offset_delta));
        PyTuple_SET_ITEM(fields, 1,
                         PyLong_FromLongLong(stamp >= 0 ? stamp : base_ts + r.ts_delta));
        PyTuple_SET_ITEM(fields, 2, key);
        PyTuple_SET_ITEM(fields, 3, value);
        PyTuple_SET_ITEM(fields, 4, headers);
        Py_INCREF(topic);
        PyTuple_SET_ITEM(fields, 5, topic);
        Py_INCREF(partition);
        PyTuple_SET_ITEM(fields, 6, partition);
        Py_INCREF(timestamp_type);
        PyTuple_SET_ITEM(fields, 7, timestamp_type);
        for (int f = 0; f < 4; f++) {
            if (PyTuple_GET_ITEM(fields, f) == NULL) {
                Py_DECREF(fields);
                return -1;
            }
        }
        PyObject *record = fields;
        if (direct) {
            /* ints, bytes, str and the untracked headers: no cycle through the record. */
            if (plain_fields) PyObject_GC_UnTrack(fields);
        } else {
            PyObject *new_args = PyTuple_Pack(1, fields);
            Py_DECREF(fields);
            if (new_args == NULL) return -1;
            record = PyTuple_Type.tp_new((PyTypeObject *)record_class, new_args, NULL);
            Py_DECREF(new_args);
            if (record == NULL) return -1;
        }
        int failed = PyList_Append(out, record);
        Py_DECREF(record);
        if (failed < 0) return -1;
    }
    return c.pos == c.end ? 0 : -1;
}

static PyObject *decode_section(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *record_class, *topic, *partition, *timestamp_type;
    long long base_offset, base_ts, stamp;
    long record_count, last_delta;
    if (!PyArg_ParseTuple(args, "y*OLLllOOOL", &view, &record_class, &base_offset, &base_ts,
                          &record_count, &last_delta, &topic, &partition, &timestamp_type,
                          &stamp))
        return NULL;
    PyObject *out = NULL;
    key_cache cache = {{NULL}, {NULL}, NULL};
    if (!PyType_Check(record_class) ||
        !PyType_IsSubtype((PyTypeObject *)record_class, &PyTuple_Type) || record_count < 0 ||
        record_count > view.len) {
        PyErr_SetString(PyExc_ValueError, "bad arguments");
        goto done;
    }
    out = PyList_New(0);
    if (out == NULL) goto done;
    if (decode_into(out, (const unsigned char *)view.buf, view.len, record_class, base_offset,
                    base_ts, record_count, last_delta, topic, partition, timestamp_type, stamp,
                    LLONG_MIN, &cache) < 0) {
        Py_CLEAR(out);
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "records section does not decode");
    }
done:
    clear_cache(&cache);
    PyBuffer_Release(&view);
    return out;
}

/* decode_chunk(chunk, record_class, topic, partition, position, check_crcs, create_time,
 *              log_append_time, out, starts, epochs) -> (stop, reached)
 *
 * A consumer's decode of a fetched chunk (client/fetched.py) in one call, for the batches
 * it can take whole: uncompressed v2 batches (control batches skipped), CRC-checked when
 * `check_crcs`. Each batch's records from offset `position` on are appended to `out`; for a
 * batch that gave some, its first index in `out` to `starts` and its partitionLeaderEpoch
 * to `epochs`. `reached`: the offset after the last batch taken (`position` at least).
 * `stop`: where the batches it took end, the chunk's length or the position of a partial
 * batch at its end when it took them all; else the first batch it did not take (legacy,
 * compressed, anything that fails a check, a LogAppendTime batch with no stamp), which the
 * caller's per-batch loop decodes or names. */
static PyObject *decode_chunk(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *record_class, *topic, *partition, *create_time, *log_append_time, *out, *starts,
        *epochs;
    long long position;
    int check_crcs;
    if (!PyArg_ParseTuple(args, "y*OOOLpOOO!O!O!", &view, &record_class, &topic, &partition,
                          &position, &check_crcs, &create_time, &log_append_time, &PyList_Type,
                          &out, &PyList_Type, &starts, &PyList_Type, &epochs))
        return NULL;
    PyObject *result = NULL;
    key_cache cache = {{NULL}, {NULL}, NULL};
    if (!PyType_Check(record_class) ||
        !PyType_IsSubtype((PyTypeObject *)record_class, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_class must be a tuple subclass");
        goto done;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len, pos = 0;
    long long reached = position;
    while (end - pos > 16) {
        const unsigned char *h = buf + pos;
        int32_t length = be32(h + 8);
        if (length < 0) break;
        if (pos + LOG_OVERHEAD + (Py_ssize_t)length > end) { pos = end; break; }
        if (h[16] != 2 || end - pos < HEADER_BYTES) break;
        int64_t base_offset = be64(h);
        int16_t attributes = be16(h + 21);
        int32_t last_delta = be32(h + 23);
        int64_t base_ts = be64(h + 27), max_ts = be64(h + 35);
        int32_t count = be32(h + 57);
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (length < MIN_BATCH_LENGTH || (attributes & COMPRESSION_MASK) != 0 || count < 0 ||
            last_delta < 0)
            break;
        if (check_crcs && batch_crc(h, size) != (uint32_t)be32(h + 17)) break;
        int64_t last_offset = base_offset + last_delta;
        if (last_offset >= position && !(attributes & CONTROL_MASK)) {
            int append_time = (attributes & TIMESTAMP_TYPE_MASK) != 0;
            if (append_time && max_ts < 0) break;
            Py_ssize_t before = PyList_GET_SIZE(out);
            if (decode_into(out, h + HEADER_BYTES, size - HEADER_BYTES, record_class,
                            base_offset, base_ts, count, last_delta, topic, partition,
                            append_time ? log_append_time : create_time,
                            append_time ? max_ts : -1, position, &cache) < 0) {
                PyErr_Clear();
                if (PyList_SetSlice(out, before, PyList_GET_SIZE(out), NULL) < 0) goto done;
                break;
            }
            if (PyList_GET_SIZE(out) > before) {
                PyObject *at = PyLong_FromSsize_t(before);
                PyObject *epoch = PyLong_FromLong(be32(h + 12));
                int failed = at == NULL || epoch == NULL || PyList_Append(starts, at) < 0 ||
                             PyList_Append(epochs, epoch) < 0;
                Py_XDECREF(at);
                Py_XDECREF(epoch);
                if (failed) goto done;
            }
        }
        if (last_offset + 1 > reached) reached = last_offset + 1;
        pos += size;
    }
    if (end - pos <= 16) pos = end;
    result = Py_BuildValue("(nL)", pos, reached);
done:
    clear_cache(&cache);
    PyBuffer_Release(&view);
    return result;
}

/* decode_columns(section, base_offset, base_timestamp, record_count, last_offset_delta,
 *                stamp, min_offset, end_offset, columns, used) -> rows appended
 *
 * The records of one section, in columns for Arrow rather than as one object per record
 * (the Spark source's path): only those with min_offset <= offset < end_offset are
 * appended. `columns` is a list of eight bytearrays written from `used[i]` on (a list of
 * eight ints, updated in place: a column grows by doubling, so its bytes past `used` are
 * spare room, and a caller undoes a call by restoring `used`):
 *   0 offsets, 1 timestamps        int64 each, native order; timestamps in microseconds
 *   2 key offsets, 5 value offsets int32, Arrow's: one entry per row after a leading 0
 *   3 key data, 6 value data       the bytes, back to back
 *   4 key validity, 7 value valid. Arrow bitmaps (bit i set: row i is not null)
 * Row numbers continue from used[0] / 8. Headers are checked and skipped.
 * Raises ValueError for anything that does not decode (the Python decoder then names it),
 * or data past 2 GiB in one column (int32 offsets).
 */
static char *reserve(PyObject *column, Py_ssize_t used, Py_ssize_t extra) {
    Py_ssize_t size = PyByteArray_GET_SIZE(column);
    if (used + extra > size) {
        Py_ssize_t want = size * 2;
        if (want < used + extra) want = used + extra;
        if (want < 4096) want = 4096;
        if (PyByteArray_Resize(column, want) < 0) return NULL;
    }
    return PyByteArray_AS_STRING(column);
}

static void put_field(char *ends, char *data, char *validity, Py_ssize_t *used_ends,
                      Py_ssize_t *used_data, Py_ssize_t row, const unsigned char *p,
                      int64_t n) {
    if ((row & 7) == 0) validity[row >> 3] = 0;
    if (n < 0) {
        validity[row >> 3] &= (char)~(1 << (row & 7)); /* a row undone may have left it set */
    } else {
        validity[row >> 3] |= (char)(1 << (row & 7));
        memcpy(data + *used_data, p, (size_t)n);
        *used_data += (Py_ssize_t)n;
    }
    int32_t end32 = (int32_t)*used_data;
    memcpy(ends + *used_ends, &end32, 4);
    *used_ends += 4;
}

static PyObject *decode_columns(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *columns, *used_list;
    long long base_offset, base_ts, stamp, min_offset, end_offset;
    long record_count, last_delta;
    if (!PyArg_ParseTuple(args, "y*LLllLLLO!O!", &view, &base_offset, &base_ts, &record_count,
                          &last_delta, &stamp, &min_offset, &end_offset, &PyList_Type, &columns,
                          &PyList_Type, &used_list))
        return NULL;
    PyObject *col[8];
    Py_ssize_t used[8];
    char *buf[8];
    long appended = 0;
    int ok = PyList_GET_SIZE(columns) == 8 && PyList_GET_SIZE(used_list) == 8 &&
             record_count >= 0 && record_count <= view.len;
    for (int i = 0; ok && i < 8; i++) {
        col[i] = PyList_GET_ITEM(columns, i);
        used[i] = PyLong_AsSsize_t(PyList_GET_ITEM(used_list, i));
        ok = PyByteArray_Check(col[i]) && used[i] >= 0 && used[i] <= PyByteArray_GET_SIZE(col[i]);
    }
    if (!ok) {
        PyBuffer_Release(&view);
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "bad arguments");
        return NULL;
    }
    Py_ssize_t row = used[0] / 8;
    /* Room for every record of the section at once: no resize inside the loop. */
    Py_ssize_t extra[8] = {8 * record_count, 8 * record_count, 4 * record_count, view.len,
                           record_count / 8 + 2, 4 * record_count, view.len,
                           record_count / 8 + 2};
    for (int i = 0; i < 8; i++) {
        Py_ssize_t at = (i == 4 || i == 7) ? row >> 3 : used[i];
        buf[i] = reserve(col[i], at, extra[i]);
        if (buf[i] == NULL) goto error;
    }
    cursor c = {(const unsigned char *)view.buf, 0, view.len};
    int64_t prev_delta = -1;
    for (long i = 0; i < record_count; i++) {
        record_fields r;
        int64_t n;
        if (read_record(&c, last_delta, &prev_delta, &r) < 0) goto bad;
        for (int64_t h = 0; h < r.header_count; h++) {
            if (skip_bytes(&c, r.limit, 0, &n) < 0 || skip_bytes(&c, r.limit, -1, &n) < 0)
                goto bad;
        }
        if (c.pos != r.limit) goto bad;
        int64_t offset = base_offset + r.offset_delta;
        if (offset < min_offset || offset >= end_offset) continue;
        int64_t timestamp = (stamp >= 0 ? stamp : base_ts + r.ts_delta) * 1000; /* us */
        memcpy(buf[0] + used[0], &offset, 8);
        used[0] += 8;
        memcpy(buf[1] + used[1], &timestamp, 8);
        used[1] += 8;
        put_field(buf[2], buf[3], buf[4], &used[2], &used[3], row, r.key_p, r.key_n);
        put_field(buf[5], buf[6], buf[7], &used[5], &used[6], row, r.value_p, r.value_n);
        row++;
        appended++;
    }
    if (c.pos != c.end) goto bad;
    if (used[3] > INT32_MAX || used[6] > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a column holds more than 2 GiB");
        goto error;
    }
    used[4] = used[7] = (row + 7) >> 3;
    for (int i = 0; i < 8; i++) {
        PyObject *value = PyLong_FromSsize_t(used[i]);
        if (value == NULL || PyList_SetItem(used_list, i, value) < 0) goto error;
    }
    PyBuffer_Release(&view);
    return PyLong_FromLong(appended);
bad:
    PyErr_SetString(PyExc_ValueError, "records section does not decode");
error:
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(section, record_count, require_keys) -> (min, max) timestamp delta"},
    {"decode_section", decode_section, METH_VARARGS,
     "decode_section(section, record_class, base_offset, base_timestamp, record_count, "
     "last_offset_delta, topic, partition, timestamp_type, stamp) -> list of records"},
    {"decode_columns", decode_columns, METH_VARARGS,
     "decode_columns(section, base_offset, base_timestamp, record_count, last_offset_delta, "
     "stamp, min_offset, end_offset, columns, used) -> rows appended"},
    {"scan_input", scan_input, METH_VARARGS,
     "scan_input(view, header_class, max_message_bytes, max_codec, check_timestamps, "
     "earliest, latest, require_keys) -> (batches, slow, stop)"},
    {"scan_append", scan_append, METH_VARARGS,
     "scan_append(view, max_message_bytes, max_codec, check_timestamps, earliest, latest, "
     "require_keys) -> (table, slow, stop, offsets, max_timestamp, flags)"},
    {"scan_follower", scan_follower, METH_VARARGS,
     "scan_follower(view, next_offset, gaps_allowed, max_codec) -> (table, stop, "
     "max_timestamp, flags)"},
    {"index_entries", index_entries, METH_VARARGS,
     "index_entries(table, first_offset, segment_base, position, since_last_entry, interval, "
     "max_timestamp, offset_of_max_timestamp, last_time_entry_ms, room) -> (offset_entries, "
     "time_entries, since_last_entry, max_timestamp, offset_of_max_timestamp)"},
    {"write_batches", write_batches, METH_VARARGS,
     "write_batches(fd, file_position, view, table, first_offset, leader_epoch) -> written"},
    {"decode_chunk", decode_chunk, METH_VARARGS,
     "decode_chunk(chunk, record_class, topic, partition, position, check_crcs, create_time, "
     "log_append_time, out, starts, epochs) -> (stop, reached)"},
    {"crc32c", crc32c_py, METH_VARARGS, "crc32c(data, force_software=False) -> int"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan(void) {
    crc32c_init();
    return PyModule_Create(&module);
}
