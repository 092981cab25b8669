/* The producer's per-record hot path in C: encoding records into the records section of an
 * open RecordBatch v2, and Kafka's murmur2 partitioner for keyed records. In Python each
 * record costs a handful of list indexes, extends and attribute stores (~0.5 us), more than
 * the rest of `send`; here it is one call that writes the record's bytes in place.
 *
 * records_writer.py holds the Python reference of the same encoding (PyRecordsWriter); the
 * tests check both give the same bytes for the same records, and kafka-python too.
 *
 * Layout of one record (read back by _scan.c and record.py):
 *
 *     length          varint   bytes after this field
 *     attributes      int8     always 0
 *     timestampDelta  varlong  timestamp - the batch's first record's timestamp
 *     offsetDelta     varint   the record's index in the batch
 *     keyLength       varint   -1 for a null key
 *     key             bytes
 *     valueLength     varint   -1 for a null value
 *     value           bytes
 *     headerCount     varint
 *     headers         [keyLength varint, key (UTF-8), valueLength varint (-1: null), value]
 *
 * Every varint is zigzag-encoded, 7 bits a byte, least significant group first, as Kafka's
 * ByteUtils writes it (varint.py).
 *
 * RecordsWriter(max_records_bytes): the records section of one batch.
 *     append(key, value, timestamp_ms=None, headers=None) -> the record count, or 0 (nothing
 *         written) when the record would take the section past max_records_bytes; the first
 *         record is always taken.
 *     append_value(value, timestamp_ms) -> append(None, value, timestamp_ms)
 *     append_many(values, keys=None, timestamp_ms=None) -> how many records fitted; a bad
 *         record raises and leaves the section as it was before the call.
 *     section() -> bytes, once: it seals the section (every later append adds nothing and
 *         returns 0) and frees its buffer; record_count, records_bytes, base_timestamp,
 *         max_timestamp.
 * murmur2(data) -> Kafka's Utils.murmur2, a signed 32-bit int.
 * partition_for_key(key, num_partitions) -> (murmur2(key) & 0x7fffffff) % num_partitions.
 *
 * The producer's `send` in one call (client/fast_entries.py publishes the entries):
 * an open batch's entry is the tuple (writer, batch result, topic, partition, callbacks).
 *     use_future_type(RecordFuture): the tuple subclass the two calls below return.
 *     send_value(sticky_entries, topic, value, timestamp_ms, callback): the record into the
 *         entry sticky_entries[topic]; its RecordFuture, or None when there is no entry, its
 *         section is sealed, or the record does not fit (the caller then takes the checked
 *         path, under the accumulator's lock).
 *     send_keyed(open_entries, topic, key, value, num_partitions, timestamp_ms, callback):
 *         the same into open_entries[topic][partition_for_key(key, num_partitions)].
 * Each runs whole under the GIL and never lets it go: an append cannot interleave with a
 * section() that seals the batch, so a record is either in the sealed bytes or refused.
 * timestamp_ms None: now (CLOCK_REALTIME, as time.time_ns()). When a callback is given, the
 * record's index in the batch, its timestamp and the callback are added to the entry's
 * callbacks list, three items in a row (client/producer_batch.py says why not its future).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static int varint_size(int64_t value) {
    uint64_t u = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static unsigned char *put_varint(unsigned char *p, int64_t value) {
    uint64_t u = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (u >= 0x80) {
        *p++ = (unsigned char)(u | 0x80);
        u >>= 7;
    }
    *p++ = (unsigned char)u;
    return p;
}

/* A key, value or header value: bytes-like or None. */
typedef struct {
    const char *p;
    Py_ssize_t n;
    int null;
    int has_view;
    Py_buffer view;
} field;

static int get_field(PyObject *o, field *f) {
    f->has_view = 0;
    f->null = 0;
    if (o == Py_None) {
        f->null = 1;
        f->p = NULL;
        f->n = 0;
        return 0;
    }
    if (PyBytes_CheckExact(o)) {
        f->p = PyBytes_AS_STRING(o);
        f->n = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (PyObject_GetBuffer(o, &f->view, PyBUF_SIMPLE) < 0) return -1;
    f->has_view = 1;
    f->p = f->view.buf;
    f->n = f->view.len;
    return 0;
}

static void release_field(field *f) {
    if (f->has_view) PyBuffer_Release(&f->view);
    f->has_view = 0;
}

/* Encoded size of a field with its length prefix. */
static int64_t field_size(const field *f) {
    return f->null ? 1 : varint_size(f->n) + f->n;
}

static unsigned char *put_field(unsigned char *p, const field *f) {
    if (f->null) return put_varint(p, -1);
    p = put_varint(p, f->n);
    if (f->n) memcpy(p, f->p, (size_t)f->n);
    return p + f->n;
}

static void invalid_record(const char *format, const char *name) {
    PyObject *errors = PyImport_ImportModule("seglog.errors");
    PyObject *cls = errors ? PyObject_GetAttrString(errors, "InvalidRecordError") : NULL;
    Py_XDECREF(errors);
    if (cls == NULL) return;
    PyErr_Format(cls, format, name);
    Py_DECREF(cls);
}

/* The headers of one record, checked and measured before anything is written. */
#define INLINE_HEADERS 8
typedef struct {
    const char *key;
    Py_ssize_t key_n;
    field value;
} header;

typedef struct {
    PyObject *seq;
    Py_ssize_t count;
    header *items;
    header inline_items[INLINE_HEADERS];
    int64_t size; /* count varint and every header */
} headers_plan;

static void release_headers(headers_plan *h) {
    if (h->items != NULL) {
        for (Py_ssize_t i = 0; i < h->count; i++) release_field(&h->items[i].value);
        if (h->items != h->inline_items) PyMem_Free(h->items);
    }
    h->items = NULL;
    Py_CLEAR(h->seq);
}

static int plan_headers(PyObject *headers, headers_plan *h) {
    h->seq = NULL;
    h->items = NULL;
    h->count = 0;
    h->size = 1;
    if (headers == Py_None) return 0;
    h->seq = PySequence_Fast(headers, "headers must be a sequence of (str, bytes) pairs");
    if (h->seq == NULL) return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(h->seq);
    if (count == 0) return 0;
    if (count <= INLINE_HEADERS) {
        h->items = h->inline_items;
    } else {
        h->items = PyMem_Malloc((size_t)count * sizeof(header));
        if (h->items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    h->size = varint_size(count);
    PyObject **items = PySequence_Fast_ITEMS(h->seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = items[i];
        /* Tuples or lists: both hold their items for the length of this call. */
        if (!(PyTuple_Check(item) || PyList_Check(item)) || PySequence_Fast_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_ValueError, "each header must be a (key, value) pair");
            return -1;
        }
        PyObject *key = PySequence_Fast_GET_ITEM(item, 0);
        if (!PyUnicode_Check(key)) {
            invalid_record("header key must be str, got %s", Py_TYPE(key)->tp_name);
            return -1;
        }
        header *out = &h->items[i];
        out->key = PyUnicode_AsUTF8AndSize(key, &out->key_n);
        if (out->key == NULL) return -1;
        if (get_field(PySequence_Fast_GET_ITEM(item, 1), &out->value) < 0) return -1;
        h->count = i + 1; /* from here on, release_headers releases this one's buffer */
        h->size += varint_size(out->key_n) + out->key_n + field_size(&out->value);
    }
    return 0;
}

static unsigned char *put_headers(unsigned char *p, const headers_plan *h) {
    p = put_varint(p, h->count);
    for (Py_ssize_t i = 0; i < h->count; i++) {
        const header *item = &h->items[i];
        p = put_varint(p, item->key_n);
        memcpy(p, item->key, (size_t)item->key_n);
        p += item->key_n;
        p = put_field(p, &item->value);
    }
    return p;
}

typedef struct {
    PyObject_HEAD
    unsigned char *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
    Py_ssize_t max_records_bytes;
    int64_t base_timestamp;
    int64_t max_timestamp;
    Py_ssize_t count;
    int sealed; /* section() was taken: no more records */
} Writer;

static int reserve(Writer *w, int64_t extra) {
    if (w->len + extra <= w->cap) return 0;
    int64_t cap = w->cap ? w->cap : 1024;
    while (cap < w->len + extra) cap *= 2;
    unsigned char *buf = PyMem_Realloc(w->buf, (size_t)cap);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->buf = buf;
    w->cap = (Py_ssize_t)cap;
    return 0;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Writes one record; returns the new record count, 0 when it does not fit, -1 on error. */
static Py_ssize_t write_record(Writer *w, const field *key, const field *value,
                               int64_t timestamp, const headers_plan *headers) {
    Py_ssize_t count = w->count;
    int64_t ts_delta = 0;
    if (w->sealed) return 0;
    if (count && __builtin_sub_overflow(timestamp, w->base_timestamp, &ts_delta)) {
        PyErr_SetString(PyExc_OverflowError, "timestamp delta does not fit in 64 bits");
        return -1;
    }
    int64_t body = 1 + varint_size(ts_delta) + varint_size(count) + field_size(key) +
                   field_size(value) + (headers ? headers->size : 1);
    int64_t total = varint_size(body) + body;
    if (count && w->len + total > w->max_records_bytes) return 0;
    if (reserve(w, total) < 0) return -1;
    unsigned char *p = w->buf + w->len;
    p = put_varint(p, body);
    *p++ = 0; /* attributes */
    p = put_varint(p, ts_delta);
    p = put_varint(p, count);
    p = put_field(p, key);
    p = put_field(p, value);
    if (headers)
        p = put_headers(p, headers);
    else
        *p++ = 0; /* no headers */
    w->len += total;
    if (count == 0)
        w->base_timestamp = w->max_timestamp = timestamp;
    else if (timestamp > w->max_timestamp)
        w->max_timestamp = timestamp;
    w->count = count + 1;
    return count + 1;
}

static int get_timestamp(PyObject *o, int64_t *out) {
    if (o == NULL || o == Py_None) {
        *out = now_ms();
        return 0;
    }
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

/* Positional and keyword arguments of a METH_FASTCALL | METH_KEYWORDS method into `out`;
 * `required` of them must be given. */
static int parse_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                      const char *const *names, int n_names, int required, PyObject **out,
                      const char *method) {
    if (nargs > n_names) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments", method, n_names);
        return -1;
    }
    for (int i = 0; i < n_names; i++) out[i] = i < nargs ? args[i] : NULL;
    Py_ssize_t n_kw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < n_kw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int found = 0;
        for (int i = 0; i < n_names; i++) {
            if (PyUnicode_CompareWithASCIIString(name, names[i]) == 0) {
                if (out[i] != NULL) {
                    PyErr_Format(PyExc_TypeError, "%s() got multiple values for '%s'", method,
                                 names[i]);
                    return -1;
                }
                out[i] = args[nargs + k];
                found = 1;
                break;
            }
        }
        if (!found) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
                         method, name);
            return -1;
        }
    }
    for (int i = 0; i < required; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing argument '%s'", method, names[i]);
            return -1;
        }
    }
    return 0;
}

static PyObject *writer_append(Writer *w, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
    static const char *const names[] = {"key", "value", "timestamp_ms", "headers"};
    PyObject *a[4];
    if (parse_args(args, nargs, kwnames, names, 4, 2, a, "append") < 0) return NULL;
    int64_t timestamp;
    if (get_timestamp(a[2], &timestamp) < 0) return NULL;
    field key, value;
    headers_plan headers;
    int has_headers = a[3] != NULL && a[3] != Py_None;
    Py_ssize_t result = -1;
    key.has_view = value.has_view = 0;
    headers.seq = NULL;
    headers.items = NULL;
    if (get_field(a[0], &key) < 0 || get_field(a[1], &value) < 0) goto done;
    if (has_headers && plan_headers(a[3], &headers) < 0) goto done;
    result = write_record(w, &key, &value, timestamp, has_headers ? &headers : NULL);
done:
    release_field(&key);
    release_field(&value);
    if (has_headers) release_headers(&headers);
    return result < 0 ? NULL : PyLong_FromSsize_t(result);
}

static PyObject *writer_append_value(Writer *w, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "append_value(value, timestamp_ms)");
        return NULL;
    }
    int64_t timestamp;
    if (get_timestamp(args[1], &timestamp) < 0) return NULL;
    field key = {.p = NULL, .n = 0, .null = 1}, value;
    if (get_field(args[0], &value) < 0) return NULL;
    Py_ssize_t result = write_record(w, &key, &value, timestamp, NULL);
    release_field(&value);
    return result < 0 ? NULL : PyLong_FromSsize_t(result);
}

static PyObject *writer_append_many(Writer *w, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames) {
    static const char *const names[] = {"values", "keys", "timestamp_ms"};
    PyObject *a[3];
    if (parse_args(args, nargs, kwnames, names, 3, 1, a, "append_many") < 0) return NULL;
    int64_t timestamp;
    if (get_timestamp(a[2], &timestamp) < 0) return NULL;
    /* Undone on error: a bad record anywhere leaves the section as it was. */
    Py_ssize_t start_len = w->len, start_count = w->count;
    int64_t start_base = w->base_timestamp, start_max = w->max_timestamp;
    PyObject *values = PyObject_GetIter(a[0]);
    if (values == NULL) return NULL;
    PyObject *keys = NULL;
    if (a[1] != NULL && a[1] != Py_None) {
        keys = PyObject_GetIter(a[1]);
        if (keys == NULL) {
            Py_DECREF(values);
            return NULL;
        }
    }
    field key = {.p = NULL, .n = 0, .null = 1}, value;
    int failed = 0;
    PyObject *item;
    while ((item = PyIter_Next(values)) != NULL) {
        PyObject *key_item = NULL;
        if (keys != NULL) {
            key_item = PyIter_Next(keys);
            if (key_item == NULL) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "fewer keys than values");
                Py_DECREF(item);
                failed = 1;
                break;
            }
        }
        Py_ssize_t written = -1;
        if ((key_item == NULL || get_field(key_item, &key) == 0) &&
            get_field(item, &value) == 0) {
            written = write_record(w, &key, &value, timestamp, NULL);
            release_field(&value);
        }
        if (key_item != NULL) release_field(&key);
        key.null = 1;
        Py_XDECREF(key_item);
        Py_DECREF(item);
        if (written < 0) {
            failed = 1;
            break;
        }
        if (written == 0) break;
    }
    if (PyErr_Occurred()) failed = 1;
    Py_DECREF(values);
    Py_XDECREF(keys);
    if (failed) {
        w->len = start_len;
        w->count = start_count;
        w->base_timestamp = start_base;
        w->max_timestamp = start_max;
        return NULL;
    }
    return PyLong_FromSsize_t(w->count - start_count);
}

static PyObject *writer_section(Writer *w, PyObject *Py_UNUSED(ignored)) {
    if (w->sealed) {
        PyErr_SetString(PyExc_RuntimeError, "the records section was already taken");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)w->buf, w->len);
    if (out == NULL) return NULL;
    w->sealed = 1;
    /* A sealed writer may still be referenced (a stale entry of the producer's) until its
     * partition opens another batch: it keeps no buffer meanwhile. */
    PyMem_Free(w->buf);
    w->buf = NULL;
    w->cap = 0;
    return out;
}

static int writer_init(Writer *w, PyObject *args, PyObject *kwds) {
    static char *names[] = {"max_records_bytes", NULL};
    Py_ssize_t max_records_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", names, &max_records_bytes)) return -1;
    w->max_records_bytes = max_records_bytes;
    w->len = 0;
    w->count = 0;
    w->sealed = 0;
    w->base_timestamp = w->max_timestamp = 0;
    return 0;
}

static void writer_dealloc(Writer *w) {
    PyMem_Free(w->buf);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyObject *get_count(Writer *w, void *Py_UNUSED(c)) { return PyLong_FromSsize_t(w->count); }
static PyObject *get_bytes(Writer *w, void *Py_UNUSED(c)) { return PyLong_FromSsize_t(w->len); }
static PyObject *get_base(Writer *w, void *Py_UNUSED(c)) {
    return PyLong_FromLongLong(w->base_timestamp);
}
static PyObject *get_max(Writer *w, void *Py_UNUSED(c)) {
    return PyLong_FromLongLong(w->max_timestamp);
}
static PyObject *get_limit(Writer *w, void *Py_UNUSED(c)) {
    return PyLong_FromSsize_t(w->max_records_bytes);
}

static PyGetSetDef writer_getset[] = {
    {"record_count", (getter)get_count, NULL, NULL, NULL},
    {"records_bytes", (getter)get_bytes, NULL, NULL, NULL},
    {"base_timestamp", (getter)get_base, NULL, NULL, NULL},
    {"max_timestamp", (getter)get_max, NULL, NULL, NULL},
    {"max_records_bytes", (getter)get_limit, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef writer_methods[] = {
    {"append", (PyCFunction)(void (*)(void))writer_append, METH_FASTCALL | METH_KEYWORDS,
     "append(key, value, timestamp_ms=None, headers=None) -> record count, 0 if it does not fit"},
    {"append_value", (PyCFunction)(void (*)(void))writer_append_value, METH_FASTCALL,
     "append_value(value, timestamp_ms) -> record count, 0 if it does not fit"},
    {"append_many", (PyCFunction)(void (*)(void))writer_append_many,
     METH_FASTCALL | METH_KEYWORDS,
     "append_many(values, keys=None, timestamp_ms=None) -> how many records fitted"},
    {"section", (PyCFunction)writer_section, METH_NOARGS, "section() -> the records' bytes"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "seglog.records._encode.RecordsWriter",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The records section of one RecordBatch v2 being built.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)writer_init,
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_methods = writer_methods,
    .tp_getset = writer_getset,
};

static int32_t murmur2(const unsigned char *data, Py_ssize_t length) {
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28cU ^ (uint32_t)length;
    Py_ssize_t whole = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < whole; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 |
                     (uint32_t)data[i + 2] << 16 | (uint32_t)data[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[whole + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[whole + 1] << 8;
        /* fall through */
    case 1:
        h ^= data[whole];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

static PyObject *py_murmur2(PyObject *Py_UNUSED(self), PyObject *data) {
    field f;
    if (get_field(data, &f) < 0) return NULL;
    int32_t h = murmur2((const unsigned char *)f.p, f.n);
    release_field(&f);
    return PyLong_FromLong(h);
}

static PyObject *py_partition_for_key(PyObject *Py_UNUSED(self), PyObject *const *args,
                                      Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "partition_for_key(key, num_partitions)");
        return NULL;
    }
    long num_partitions = PyLong_AsLong(args[1]);
    if (num_partitions == -1 && PyErr_Occurred()) return NULL;
    if (num_partitions < 1) {
        PyErr_Format(PyExc_ValueError, "num_partitions must be >= 1, got %ld", num_partitions);
        return NULL;
    }
    field f;
    if (get_field(args[0], &f) < 0) return NULL;
    if (f.null) {
        PyErr_SetString(PyExc_TypeError, "a key to partition by cannot be None");
        return NULL;
    }
    long positive = (long)((uint32_t)murmur2((const unsigned char *)f.p, f.n) & 0x7fffffffU);
    release_field(&f);
    return PyLong_FromLong(positive % num_partitions);
}

static PyTypeObject *future_type = NULL; /* RecordFuture, given by use_future_type */

static PyObject *py_use_future_type(PyObject *Py_UNUSED(self), PyObject *type) {
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "use_future_type(a tuple subclass)");
        return NULL;
    }
    Py_INCREF(type);
    Py_XSETREF(future_type, (PyTypeObject *)type);
    Py_RETURN_NONE;
}

static PyObject *write_and_register(Writer *w, PyObject *entry, const field *key,
                                    const field *value, int64_t timestamp, PyObject *callback);

/* The record into the open batch `entry` (writer, result, topic, partition, callbacks): its
 * future, None when it cannot go there (no entry, sealed, full), NULL on error. */
static PyObject *send_to_entry(PyObject *entry, const field *key, const field *value,
                               PyObject *timestamp_ms, PyObject *callback) {
    if (entry == NULL || entry == Py_None) Py_RETURN_NONE;
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 5 ||
        !Py_IS_TYPE(PyTuple_GET_ITEM(entry, 0), &WriterType) ||
        !PyList_CheckExact(PyTuple_GET_ITEM(entry, 4))) {
        PyErr_SetString(PyExc_TypeError,
                        "an entry is (RecordsWriter, result, topic, partition, callbacks list)");
        return NULL;
    }
    if (future_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "use_future_type was not called");
        return NULL;
    }
    Writer *w = (Writer *)PyTuple_GET_ITEM(entry, 0);
    if (w->sealed) Py_RETURN_NONE;
    int64_t timestamp;
    if (get_timestamp(timestamp_ms, &timestamp) < 0) return NULL;
    /* No collection from the write to the callback's registration: a collection may run
     * finalizers, and one that let the GIL go would let the sender seal and complete the
     * batch before the callback is in its list. */
    int collecting = PyGC_Disable();
    PyObject *out = write_and_register(w, entry, key, value, timestamp, callback);
    if (collecting) PyGC_Enable();
    return out;
}

static PyObject *write_and_register(Writer *w, PyObject *entry, const field *key,
                                    const field *value, int64_t timestamp, PyObject *callback) {
    Py_ssize_t count = write_record(w, key, value, timestamp, NULL);
    if (count < 0) return NULL;
    if (count == 0) Py_RETURN_NONE;
    PyObject *index = PyLong_FromSsize_t(count - 1);
    PyObject *stamp = PyLong_FromLongLong(timestamp);
    PyObject *future = index && stamp ? future_type->tp_alloc(future_type, 5) : NULL;
    if (future == NULL) {
        /* The record is written: an error here loses its future, never its bytes. */
        Py_XDECREF(index);
        Py_XDECREF(stamp);
        return NULL;
    }
    for (int i = 1; i <= 3; i++) Py_INCREF(PyTuple_GET_ITEM(entry, i));
    PyTuple_SET_ITEM(future, 0, PyTuple_GET_ITEM(entry, 1));
    PyTuple_SET_ITEM(future, 1, PyTuple_GET_ITEM(entry, 2));
    PyTuple_SET_ITEM(future, 2, PyTuple_GET_ITEM(entry, 3));
    PyTuple_SET_ITEM(future, 3, index);
    PyTuple_SET_ITEM(future, 4, stamp);
    if (callback != Py_None) {
        PyObject *callbacks = PyTuple_GET_ITEM(entry, 4);
        Py_ssize_t before = PyList_GET_SIZE(callbacks);
        if (PyList_Append(callbacks, index) < 0 || PyList_Append(callbacks, stamp) < 0 ||
            PyList_Append(callbacks, callback) < 0) {
            /* Whole triples only: what was appended of this one is taken back. */
            PyList_SetSlice(callbacks, before, PyList_GET_SIZE(callbacks), NULL);
            Py_DECREF(future);
            return NULL;
        }
    }
    return future;
}

static PyObject *py_send_value(PyObject *Py_UNUSED(self), PyObject *const *args,
                               Py_ssize_t nargs) {
    if (nargs != 5 || !PyDict_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "send_value(sticky_entries: dict, topic, value, timestamp_ms, callback)");
        return NULL;
    }
    PyObject *entry = PyDict_GetItemWithError(args[0], args[1]);
    if (entry == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    field key = {.p = NULL, .n = 0, .null = 1}, value;
    if (get_field(args[2], &value) < 0) return NULL;
    Py_INCREF(entry); /* borrowed from a dict other threads change */
    PyObject *out = send_to_entry(entry, &key, &value, args[3], args[4]);
    Py_DECREF(entry);
    release_field(&value);
    return out;
}

static PyObject *py_send_keyed(PyObject *Py_UNUSED(self), PyObject *const *args,
                               Py_ssize_t nargs) {
    if (nargs != 7 || !PyDict_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "send_keyed(open_entries: dict, topic, key, value, num_partitions, "
                        "timestamp_ms, callback)");
        return NULL;
    }
    PyObject *entries = PyDict_GetItemWithError(args[0], args[1]);
    if (entries == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (!PyList_CheckExact(entries)) {
        PyErr_SetString(PyExc_TypeError, "open_entries[topic] is a list of entries");
        return NULL;
    }
    long num_partitions = PyLong_AsLong(args[4]);
    if (num_partitions == -1 && PyErr_Occurred()) return NULL;
    if (num_partitions < 1) {
        PyErr_Format(PyExc_ValueError, "num_partitions must be >= 1, got %ld", num_partitions);
        return NULL;
    }
    field key, value;
    if (get_field(args[2], &key) < 0) return NULL;
    if (key.null) {
        PyErr_SetString(PyExc_TypeError, "a key to partition by cannot be None");
        return NULL;
    }
    long partition =
        (long)((uint32_t)murmur2((const unsigned char *)key.p, key.n) & 0x7fffffffU) %
        num_partitions;
    PyObject *out;
    if (partition >= PyList_GET_SIZE(entries)) {
        out = Py_None;
        Py_INCREF(out);
    } else if (get_field(args[3], &value) < 0) {
        out = NULL;
    } else {
        PyObject *entry = PyList_GET_ITEM(entries, partition);
        Py_INCREF(entry); /* borrowed from a list other threads change */
        out = send_to_entry(entry, &key, &value, args[5], args[6]);
        Py_DECREF(entry);
        release_field(&value);
    }
    release_field(&key);
    return out;
}

static PyMethodDef methods[] = {
    {"murmur2", py_murmur2, METH_O, "murmur2(data) -> Kafka's murmur2, signed 32-bit"},
    {"partition_for_key", (PyCFunction)(void (*)(void))py_partition_for_key, METH_FASTCALL,
     "partition_for_key(key, num_partitions) -> Kafka's default partition of a keyed record"},
    {"use_future_type", py_use_future_type, METH_O,
     "use_future_type(type): the tuple subclass send_value and send_keyed return"},
    {"send_value", (PyCFunction)(void (*)(void))py_send_value, METH_FASTCALL,
     "send_value(sticky_entries, topic, value, timestamp_ms, callback) -> future or None"},
    {"send_keyed", (PyCFunction)(void (*)(void))py_send_keyed, METH_FASTCALL,
     "send_keyed(open_entries, topic, key, value, num_partitions, timestamp_ms, callback)"
     " -> future or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_encode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__encode(void) {
    if (PyType_Ready(&WriterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&WriterType);
    if (PyModule_AddObject(m, "RecordsWriter", (PyObject *)&WriterType) < 0) {
        Py_DECREF(&WriterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
