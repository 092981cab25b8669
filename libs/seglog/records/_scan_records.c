/* seglog.records._scan, the records-section check (scan_section, scan_records) and the
 * storage node's batch-by-batch input check that builds header tuples (scan_input), which
 * reads the v2 batch header (_scan_common.h) and then the records section below.
 *
 * Structural check of a RecordBatch v2 records section, in one pass and without creating a
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
#include "_scan_common.h"

static PyObject *fail(long index, Py_ssize_t position, const char *what) {
    PyErr_Format(PyExc_ValueError, "record %ld at position %zd: %s", index, position, what);
    return NULL;
}

static const char RECORD_COUNT_PROBLEM[] = "record count";

/* Walk one records section; NULL when it is whole, else what is wrong (with the record's
 * index and start position in *index / *record_start). */
SCAN_HIDDEN const char *scan_section(const unsigned char *buf, Py_ssize_t len, long record_count,
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

SCAN_HIDDEN PyObject *scan_records(PyObject *self, PyObject *args) {
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
SCAN_HIDDEN PyObject *scan_input(PyObject *self, PyObject *args) {
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
