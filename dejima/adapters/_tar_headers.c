/* A pinned archive's tar headers read in C (pinned_archives.tar_entries): each header's checksum
 * checked, its size and name read, the archive's bounds kept.  In Python this was ~4 us a header
 * (an npm tree's 600 tarballs: ~18k headers, ~70 ms of CPU in an audit that inflates them); here the
 * arithmetic alone.  The entries' bytes are hashed by the caller (hashlib, from slices of ``data``),
 * and a GNU long name or a pax header's records are read there too: this only says where they are.
 * pinned_archives._headers_in_python is the same in Python, used where this was not built, and the
 * tests hold the two to the same answers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define BLOCK 512

/* Bytes [start, end) of a field, up to its first NUL, without the whitespace bytes.strip() drops. */
static void field_text(const unsigned char *field, Py_ssize_t length, Py_ssize_t *start, Py_ssize_t *end) {
    const unsigned char *nul = memchr(field, 0, (size_t)length);
    Py_ssize_t stop = nul != NULL ? nul - field : length, first = 0;
    while (first < stop && strchr(" \t\n\r\v\f", field[first]) != NULL && field[first] != 0)
        first++;
    while (stop > first && strchr(" \t\n\r\v\f", field[stop - 1]) != NULL && field[stop - 1] != 0)
        stop--;
    *start = first;
    *end = stop;
}

/* An octal text field's value: 0 when empty, -1 when it is not octal digits or does not fit. */
static long long octal(const unsigned char *field, Py_ssize_t length) {
    Py_ssize_t start, end;
    long long value = 0;
    field_text(field, length, &start, &end);
    for (Py_ssize_t i = start; i < end; i++) {
        if (field[i] < '0' || field[i] > '7' || value > (LLONG_MAX >> 3))
            return -1;
        value = value << 3 | (field[i] - '0');
    }
    return value;
}

/* A numeric field: octal text, or base-256 when its first byte's high bit is set; -1 when it
 * cannot be read, -2 when it is larger than any archive (both refused by the caller). */
static long long number(const unsigned char *field, Py_ssize_t length) {
    if (!(field[0] & 0x80))
        return octal(field, length);
    long long value = field[0] & 0x7F;
    for (Py_ssize_t i = 1; i < length; i++) {
        if (value > (LLONG_MAX >> 8))
            return -2;
        value = value << 8 | field[i];
    }
    return value;
}

/* Whether the header's stored checksum is its bytes summed, the field itself as spaces: unsigned,
 * or as signed bytes (old writers). */
static int checksum_holds(const unsigned char *header) {
    Py_ssize_t start, end;
    field_text(header + 148, 8, &start, &end);
    if (start == end)
        return 0;
    long long stored = octal(header + 148, 8);
    long long total = 0, high = 0;
    for (int i = 0; i < BLOCK; i++) {
        unsigned char byte = i >= 148 && i < 156 ? ' ' : header[i];
        total += byte;
        high += byte > 127;
    }
    return stored >= 0 && (stored == total || stored == total - 256 * high);
}

/* The header's name: ustar's prefix and name joined by '/', or its name alone. */
static PyObject *name_of(const unsigned char *header) {
    const unsigned char *nul = memchr(header, 0, 100);
    Py_ssize_t length = nul != NULL ? nul - header : 100;
    if (memcmp(header + 257, "ustar\0", 6) != 0)
        return PyBytes_FromStringAndSize((const char *)header, length);
    const unsigned char *prefix = header + 345, *end = memchr(prefix, 0, 155);
    Py_ssize_t prefix_length = end != NULL ? end - prefix : 155;
    if (prefix_length == 0)
        return PyBytes_FromStringAndSize((const char *)header, length);
    PyObject *joined = PyBytes_FromStringAndSize(NULL, prefix_length + 1 + length);
    if (joined != NULL) {
        char *into = PyBytes_AS_STRING(joined);
        memcpy(into, prefix, (size_t)prefix_length);
        into[prefix_length] = '/';
        memcpy(into + prefix_length + 1, header, (size_t)length);
    }
    return joined;
}

static int all_zero(const unsigned char *block) {
    for (int i = 0; i < BLOCK; i++)
        if (block[i])
            return 0;
    return 1;
}

/* headers(data, limit) -> [(kind, name, start, size)] */
static PyObject *headers(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "headers(data: bytes, limit: int)");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t length = PyBytes_GET_SIZE(args[0]), offset = 0, count = 0;
    PyObject *found = PyList_New(0);
    if (found == NULL)
        return NULL;
    while (offset + BLOCK <= length) {
        const unsigned char *header = data + offset;
        if (all_zero(header))
            break;
        if (++count > limit) {
            PyErr_Format(PyExc_ValueError, "more than %zd entries", limit);
            goto failed;
        }
        if (!checksum_holds(header)) {
            PyErr_SetString(PyExc_ValueError, "a tar header whose checksum is wrong");
            goto failed;
        }
        long long size = number(header + 124, 12);
        Py_ssize_t start = offset + BLOCK;
        if (size == -1) {
            PyErr_SetString(PyExc_ValueError, "a tar header whose size cannot be read");
            goto failed;
        }
        if (size == -2 || size > length - start) {
            PyErr_SetString(PyExc_ValueError, "an entry past the archive's end");
            goto failed;
        }
        offset = start + (Py_ssize_t)((size + BLOCK - 1) / BLOCK * BLOCK);
        PyObject *name = name_of(header);
        PyObject *entry = name != NULL ? Py_BuildValue("(iNnn)", header[156], name, start, (Py_ssize_t)size) : NULL;
        if (entry == NULL || PyList_Append(found, entry) < 0) {
            Py_XDECREF(entry);
            goto failed;
        }
        Py_DECREF(entry);
    }
    return found;
failed:
    Py_DECREF(found);
    return NULL;
}

static PyMethodDef methods[] = {
    {"headers", (PyCFunction)(void (*)(void))headers, METH_FASTCALL,
     "headers(data, limit) -> [(kind, name, start, size)]\n\n"
     "An uncompressed tar archive's headers up to its first zero block: each one's type byte, its\n"
     "name (ustar's prefix and name joined by '/'; bytes), where its content starts in ``data`` and\n"
     "its size. A ValueError for a wrong checksum, a size that cannot be read or goes past the end\n"
     "of ``data``, or more than ``limit`` headers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tar_headers", NULL, 0, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__tar_headers(void) {
    return PyModule_Create(&module);
}
