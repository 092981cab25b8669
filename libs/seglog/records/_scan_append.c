/* seglog.records._scan, the storage node's append path in one pass: the leader's check of a
 * produced input (scan_append) and the follower's of the leader's bytes (scan_follower), each
 * leaving a table of 40-byte entries (format below); the sparse index entries for a table's
 * batches (index_entries, writing the offset and time index formats); and the leader's
 * vectored write with offsets assigned (write_batches). Reads v2 batch headers
 * (_scan_common.h) and, for the leader's uncompressed batches, their records sections
 * (_scan_records.c: scan_section). */
#include "_scan_common.h"

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
/* scan_append(view, max_message_bytes, max_codec, check_timestamps, earliest, latest,
 *             require_keys) -> (table, slow, stop, offsets, max_timestamp, flags)
 *
 * scan_input's checks and the CRC of every batch, stopping at the first batch that is not
 * v2 or fails one (`stop`: its position; the input's length when none did). `slow`: the
 * positions of compressed, control and LogAppendTime batches, whose inside the caller
 * checks. `offsets`: the records the table's batches hold; `max_timestamp` their largest
 * maxTimestamp (-1 when none); `flags` 1 when a batch has a producer id, 2 when the
 * batches' partitionLeaderEpochs are not all the same. */
SCAN_HIDDEN PyObject *scan_append(PyObject *self, PyObject *args) {
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
SCAN_HIDDEN PyObject *scan_follower(PyObject *self, PyObject *args) {
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
SCAN_HIDDEN PyObject *index_entries(PyObject *self, PyObject *args) {
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

SCAN_HIDDEN PyObject *write_batches(PyObject *self, PyObject *args) {
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
