/* The DAC board's SET frame, encoded in one compiled call (equimus_hw.valve.protocol).
 *
 * encode_set(seq, codes) gives the bytes protocol.encode(Set(seq, codes)) gives: the frame
 * (type, seq, channel count, little-endian codes, CRC-16/CCITT-FALSE of all that) stuffed by
 * COBS and closed by the 0x00 delimiter; and it refuses what that refuses, with the same
 * exception and message (tests/valve/test_wire.py draws both on random input). Why: the
 * driver encodes a SET on every frame, and at 120 Hz the interpreted encoder runs from cold
 * caches, about 110 us on a 2-core virtual machine against 6 us warm (docs/benchmarks.md,
 * issue 30); one compiled call touches a fraction of the memory.
 *
 * T_SET and MAX_CHANNELS are protocol.py's; the module exports them and a test compares. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define T_SET 0x03
#define MAX_CHANNELS 8
#define FRAME_MAX (3 + 2 * MAX_CHANNELS + 2)

static uint16_t crc16_ccitt(const uint8_t *p, Py_ssize_t n)
{
    uint16_t crc = 0xFFFF;
    for (Py_ssize_t i = 0; i < n; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

/* protocol.cobs_encode for a frame shorter than 254 bytes, then the delimiter: each run
 * between zero bytes (the last one too, empty or not) is its length + 1, then the run. */
static Py_ssize_t cobs_frame(const uint8_t *in, Py_ssize_t n, uint8_t *out)
{
    Py_ssize_t o = 0, start = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        if (i == n || in[i] == 0) {
            out[o++] = (uint8_t)(i - start + 1);
            memcpy(out + o, in + start, (size_t)(i - start));
            o += i - start;
            start = i + 1;
        }
    }
    out[o++] = 0x00;
    return o;
}

/* int(obj) in 0..hi, else -1 with `err` raised by the caller's message; -2: int() raised. */
static long as_bounded(PyObject *obj, long hi)
{
    PyObject *v = PyNumber_Long(obj);
    if (v == NULL)
        return -2;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        return -2;
    if (overflow || x < 0 || x > hi)
        return -1;
    return (long)x;
}

static PyObject *encode_set(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "encode_set() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *seq_obj = args[0];
    PyObject *codes = PySequence_Fast(args[1], "SET: codes must be a sequence");
    if (codes == NULL)
        return NULL;
    uint8_t frame[FRAME_MAX];
    Py_ssize_t k = PySequence_Fast_GET_SIZE(codes);
    if (k < 1 || k > MAX_CHANNELS) {
        PyErr_Format(PyExc_ValueError, "SET: %zd channels, allowed 1..%d", k, MAX_CHANNELS);
        Py_DECREF(codes);
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(codes);
    for (Py_ssize_t i = 0; i < k; i++) {
        long c = as_bounded(items[i], 0xFFFF);
        if (c == -1)
            PyErr_Format(PyExc_ValueError, "SET: code %S outside 0..65535", items[i]);
        if (c < 0) {
            Py_DECREF(codes);
            return NULL;
        }
        frame[3 + 2 * i] = (uint8_t)(c & 0xFF);
        frame[4 + 2 * i] = (uint8_t)(c >> 8);
    }
    Py_DECREF(codes);
    long seq = as_bounded(seq_obj, 0xFF);
    if (seq == -1)
        PyErr_Format(PyExc_ValueError, "seq=%S does not fit in a byte", seq_obj);
    if (seq < 0)
        return NULL;
    frame[0] = T_SET;
    frame[1] = (uint8_t)seq;
    frame[2] = (uint8_t)k;
    Py_ssize_t n = 3 + 2 * k;
    uint16_t crc = crc16_ccitt(frame, n);
    frame[n] = (uint8_t)(crc & 0xFF);
    frame[n + 1] = (uint8_t)(crc >> 8);
    n += 2;
    uint8_t out[FRAME_MAX + 2];
    Py_ssize_t m = cobs_frame(frame, n, out);
    return PyBytes_FromStringAndSize((const char *)out, m);
}

static PyMethodDef methods[] = {
    {"encode_set", (PyCFunction)(void (*)(void))encode_set, METH_FASTCALL,
     "encode_set(seq, codes) -> bytes: protocol.encode(Set(seq, codes)), compiled."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wire", "The valve board's SET frame, compiled (see _wire.c).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__wire(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "T_SET", T_SET) < 0
        || PyModule_AddIntConstant(m, "MAX_CHANNELS", MAX_CHANNELS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
