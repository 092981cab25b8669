/* seglog.records._scan, the Spark source's decoder of one records section into Arrow
 * columns (decode_columns). Reads each record's fields (_scan_common.h: read_record; the
 * layout is in _scan_records.c) and skips its headers; writes the column formats below. */
#include "_scan_common.h"

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

SCAN_HIDDEN PyObject *decode_columns(PyObject *self, PyObject *args) {
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
