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

static PyObject *scan_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    long record_count;
    int require_keys;
    if (!PyArg_ParseTuple(args, "y*lp", &view, &record_count, &require_keys)) return NULL;
    cursor c = {(const unsigned char *)view.buf, 0, view.len};
    int64_t min_delta = INT64_MAX, max_delta = INT64_MIN;
    long index = 0;
    PyObject *result = NULL;
    const char *problem = NULL;
    Py_ssize_t record_start = 0;
    while (c.pos < c.end) {
        int64_t length, value;
        record_start = c.pos;
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
        if (value < min_delta) min_delta = value;
        if (value > max_delta) max_delta = value;
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
    if (problem != NULL) {
        fail(index, record_start, problem);
    } else if (index != record_count) {
        PyErr_Format(PyExc_ValueError, "records section holds %ld records, recordCount says %ld",
                     index, record_count);
    } else {
        if (index == 0) min_delta = max_delta = 0;
        result = Py_BuildValue("(LL)", (long long)min_delta, (long long)max_delta);
    }
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(section, record_count, require_keys) -> (min, max) timestamp delta"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
