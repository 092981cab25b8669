/* seglog.records._scan: the module's table and init, and the CRC-32C (_crc32c.h, whose
 * tables live in this unit only: crc32c_init fills them at import, so every other unit
 * reaches the CRC through batch_crc below). The functions themselves, each beside the
 * binary format it reads: _scan_records.c (records sections, scan_input), _scan_append.c
 * (the one-pass append and its 40-byte table), _scan_decode.c (the consumer's record
 * tuples), _scan_columns.c (Arrow columns); shared helpers in _scan_common.h. */
#include "_scan_common.h"
#include "_crc32c.h"

SCAN_HIDDEN uint32_t batch_crc(const unsigned char *h, Py_ssize_t size) {
    return crc32c_of(h + 21, (size_t)(size - 21), 0, 1); /* from attributes to the end */
}

/* crc32c(data, force_software=False, fold=True) -> int: the CRC above. Recovery checks each
 * batch's CRC with it (batch.compute_crc: the folding path is about twice the crc32c
 * library's speed), and tests compare each path of _crc32c.h (the byte table, the crc32
 * loop, folding) with that library. Inputs of 64 KiB or more are computed without the GIL,
 * so a node recovering a segment keeps serving on its other threads. */
static PyObject *crc32c_py(PyObject *self, PyObject *args) {
    Py_buffer view;
    int force_software = 0, fold = 1;
    if (!PyArg_ParseTuple(args, "y*|pp", &view, &force_software, &fold)) return NULL;
    const unsigned char *data = (const unsigned char *)view.buf;
    size_t size = (size_t)view.len;
    uint32_t crc;
    if (size >= 65536) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32c_of(data, size, force_software, fold);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c_of(data, size, force_software, fold);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
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
    {"crc32c", crc32c_py, METH_VARARGS, "crc32c(data, force_software=False, fold=True) -> int"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan(void) {
    crc32c_init();
    return PyModule_Create(&module);
}
