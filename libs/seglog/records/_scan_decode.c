/* seglog.records._scan, the consumer's decoders of uncompressed (or decompressed) v2
 * batches into record tuples: one records section (decode_section) or a whole fetched chunk
 * of batches (decode_chunk). Reads the v2 batch header (_scan_common.h) and each record's
 * fields (_scan_common.h: read_record; the layout is in _scan_records.c) and headers
 * (headerCount, then [keyLength varint >= 0, key utf-8, valueLength varint >= -1, value]). */
#include "_scan_common.h"

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

SCAN_HIDDEN PyObject *decode_section(PyObject *self, PyObject *args) {
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
 *              log_append_time, out, starts, epochs[, skip]) -> (stop, reached)
 *
 * A consumer's decode of a fetched chunk (client/fetched.py) in one call, for the batches
 * it can take whole: uncompressed v2 batches (control batches skipped), CRC-checked when
 * `check_crcs`. Each batch's records from offset `position` on are appended to `out`; for a
 * batch that gave some, its first index in `out` to `starts` and its partitionLeaderEpoch
 * to `epochs`. `reached`: the offset after the last batch taken (`position` at least).
 * `stop`: where the batches it took end, the chunk's length or the position of a partial
 * batch at its end when it took them all; else the first batch it did not take (legacy,
 * compressed, anything that fails a check, a LogAppendTime batch with no stamp), which the
 * caller's per-batch loop decodes or names. `skip`: None, or a set of the base offsets of
 * transactional batches not to hand out (an aborted transaction's, for a read_committed
 * consumer: client/fetched.py), passed over as control batches are; only transactional
 * batches are looked up in it. */
SCAN_HIDDEN PyObject *decode_chunk(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *record_class, *topic, *partition, *create_time, *log_append_time, *out, *starts,
        *epochs, *skip = Py_None;
    long long position;
    int check_crcs;
    if (!PyArg_ParseTuple(args, "y*OOOLpOOO!O!O!|O", &view, &record_class, &topic, &partition,
                          &position, &check_crcs, &create_time, &log_append_time, &PyList_Type,
                          &out, &PyList_Type, &starts, &PyList_Type, &epochs, &skip))
        return NULL;
    PyObject *result = NULL;
    key_cache cache = {{NULL}, {NULL}, NULL};
    if (!PyType_Check(record_class) ||
        !PyType_IsSubtype((PyTypeObject *)record_class, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_class must be a tuple subclass");
        goto done;
    }
    if (skip != Py_None && !PyAnySet_Check(skip)) {
        PyErr_SetString(PyExc_TypeError, "skip must be a set or None");
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
        int skipped = 0;
        if (skip != Py_None && (attributes & TRANSACTIONAL_MASK)) {
            PyObject *key = PyLong_FromLongLong(base_offset);
            if (key == NULL) goto done;
            skipped = PySet_Contains(skip, key);
            Py_DECREF(key);
            if (skipped < 0) goto done;
        }
        if (last_offset >= position && !(attributes & CONTROL_MASK) && !skipped) {
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
