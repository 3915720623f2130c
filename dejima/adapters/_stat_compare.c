/* The end walk's one question per trusted directory, asked in C (tree_walk._Walk._as_listed):
 * do these children, lstat'ed relative to the directory's descriptor, each have the columns
 * (inode, ctime, size) the start recorded?  From Python, an lstat and its stat_result cost ~2.4 us per child
 * (100k children: ~250 ms of CPU); here ~1 us, the system call itself.  Nothing else: any
 * difference, any failure, any name it cannot pass to the kernel as it is, answers False, and the
 * walk then compares that directory the long way, in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

/* Seconds whose nanoseconds fit in a long long (year 2255 either way): a time beyond is a session's
 * own (mtime is settable), computed exactly with Python's integers. */
#define NS_SAFE_SECONDS 9000000000LL

/* The snapshot's columns (core/snapshot.py: SnapshotEntry's fields) an lstat can be compared on. */
static const char *const COLUMN_NAMES[] = {"inode", "ctime_ns", "mtime_ns", "size", "nlink", "uid", "gid", NULL};
enum { INODE, CTIME, MTIME, SIZE, NLINK, UID, GID };
#define MAX_COLUMNS 7

/* One column of an lstat, as a signed or unsigned value; 0 when it cannot be had exactly. */
static int column_of(const struct stat *info, int column, long long *sign, unsigned long long *unsign, int *is_signed) {
    *is_signed = column == CTIME || column == MTIME || column == SIZE;
    switch (column) {
    case INODE: *unsign = (unsigned long long)info->st_ino; return 1;
    case NLINK: *unsign = (unsigned long long)info->st_nlink; return 1;
    case UID: *unsign = (unsigned long long)info->st_uid; return info->st_uid != (uid_t)-1;
    case GID: *unsign = (unsigned long long)info->st_gid; return info->st_gid != (gid_t)-1;
    case SIZE: *sign = (long long)info->st_size; return 1;
    default: {
        struct timespec time = column == CTIME ? info->st_ctim : info->st_mtim;
        if (time.tv_sec > NS_SAFE_SECONDS || time.tv_sec < -NS_SAFE_SECONDS)
            return 0;  /* the long way computes it exactly */
        *sign = (long long)time.tv_sec * 1000000000LL + (long long)time.tv_nsec;
        return 1;
    }
    }
}

/* ``names`` as the kernel takes them (os.fsencode's bytes), each in a new reference; NULL with an
 * exception set, or with ``*usable`` 0 when a name holds a NUL (the kernel would read a shorter one). */
static PyObject **encoded_names(PyObject *names, Py_ssize_t count, int *usable) {
    PyObject **encoded = PyMem_Calloc((size_t)count ? (size_t)count : 1, sizeof(PyObject *));
    *usable = 1;
    if (encoded == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = PyList_GET_ITEM(names, i);
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "a name is not a str");
            goto failed;
        }
        encoded[i] = PyUnicode_EncodeFSDefault(name);
        if (encoded[i] == NULL)
            goto failed;
        if (strlen(PyBytes_AS_STRING(encoded[i])) != (size_t)PyBytes_GET_SIZE(encoded[i]))
            *usable = 0;
    }
    return encoded;
failed:
    for (Py_ssize_t i = 0; i < count; i++)
        Py_XDECREF(encoded[i]);
    PyMem_Free(encoded);
    return NULL;
}

static void free_names(PyObject **encoded, Py_ssize_t count) {
    if (encoded == NULL)
        return;
    for (Py_ssize_t i = 0; i < count; i++)
        Py_XDECREF(encoded[i]);
    PyMem_Free(encoded);
}

static int descriptor(PyObject *value, int *fd) {
    long number = PyLong_AsLong(value);
    if (number == -1 && PyErr_Occurred())
        return 0;
    if (number < 0 || number > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "not a file descriptor");
        return 0;
    }
    *fd = (int)number;
    return 1;
}

/* same_stats(fd, names, columns, values) -> bool */
static PyObject *same_stats(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    int fd, wanted[MAX_COLUMNS];
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "same_stats(fd, names, columns, values)");
        return NULL;
    }
    if (!descriptor(args[0], &fd))
        return NULL;
    PyObject *names = args[1], *columns = args[2], *values = args[3];
    if (!PyList_Check(names) || !PyTuple_Check(columns) || !PyList_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "same_stats: names a list, columns a tuple, values a list");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(names), width = PyTuple_GET_SIZE(columns);
    if (width > MAX_COLUMNS || PyList_GET_SIZE(values) != width) {
        PyErr_SetString(PyExc_ValueError, "same_stats: one list of values per column");
        return NULL;
    }
    for (Py_ssize_t c = 0; c < width; c++) {
        const char *column = PyUnicode_Check(PyTuple_GET_ITEM(columns, c)) ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(columns, c)) : NULL;
        wanted[c] = -1;
        for (int known = 0; column != NULL && COLUMN_NAMES[known] != NULL; known++) {
            if (strcmp(column, COLUMN_NAMES[known]) == 0)
                wanted[c] = known;
        }
        if (wanted[c] < 0) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "same_stats: a column an lstat does not give");
            return NULL;
        }
        PyObject *column_values = PyList_GET_ITEM(values, c);
        if (!PyList_Check(column_values)) {
            PyErr_SetString(PyExc_TypeError, "same_stats: each column's values a list");
            return NULL;
        }
        if (PyList_GET_SIZE(column_values) != count)
            Py_RETURN_FALSE;
    }
    if (count == 0)
        Py_RETURN_TRUE;

    struct stat *found = PyMem_Malloc((size_t)count * sizeof(struct stat));
    PyObject *answer = NULL;
    int same = 1;
    PyObject **encoded = found != NULL ? encoded_names(names, count, &same) : NULL;
    if (found == NULL)
        PyErr_NoMemory();
    if (encoded == NULL)
        goto done;
    if (same) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < count; i++) {
            if (fstatat(fd, PyBytes_AS_STRING(encoded[i]), &found[i], AT_SYMLINK_NOFOLLOW) != 0) {
                same = 0;
                break;
            }
        }
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t c = 0; same && c < width; c++) {
        PyObject *column_values = PyList_GET_ITEM(values, c);
        for (Py_ssize_t i = 0; same && i < count; i++) {
            PyObject *value = PyList_GET_ITEM(column_values, i);
            long long sign = 0, expected_sign;
            unsigned long long unsign = 0, expected_unsign;
            int is_signed;
            if (!PyLong_Check(value)) {
                PyErr_SetString(PyExc_TypeError, "same_stats: a column value is not an int");
                goto done;
            }
            if (!column_of(&found[i], wanted[c], &sign, &unsign, &is_signed)) {
                same = 0;
                break;
            }
            /* Only an overflow can fail here: a value no lstat gives here, so not the same. */
            if (is_signed) {
                expected_sign = PyLong_AsLongLong(value);
                same = !PyErr_Occurred() && expected_sign == sign;
            } else {
                expected_unsign = PyLong_AsUnsignedLongLong(value);
                same = !PyErr_Occurred() && expected_unsign == unsign;
            }
            PyErr_Clear();
        }
    }
    answer = PyBool_FromLong(same);
done:
    free_names(encoded, count);
    PyMem_Free(found);
    return answer;
}

/* What the walk reads of an lstat, under os.stat_result's names: the same values, without the
 * float times and unused fields whose making is most of os.lstat's cost. */
static PyStructSequence_Field stat_fields[] = {
    {"st_mode", NULL}, {"st_ino", NULL}, {"st_dev", NULL}, {"st_nlink", NULL}, {"st_uid", NULL},
    {"st_gid", NULL}, {"st_size", NULL}, {"st_mtime_ns", NULL}, {"st_ctime_ns", NULL}, {NULL, NULL},
};
static PyStructSequence_Desc stat_desc = {
    "dejima.adapters._stat_compare.Stat", "What the walk reads of one lstat (os.stat_result's names).", stat_fields, 9,
};
static PyTypeObject *stat_type;

static PyObject *nanoseconds(struct timespec time) {
    if (time.tv_sec <= NS_SAFE_SECONDS && time.tv_sec >= -NS_SAFE_SECONDS)
        return PyLong_FromLongLong((long long)time.tv_sec * 1000000000LL + (long long)time.tv_nsec);
    PyObject *seconds = PyLong_FromLongLong((long long)time.tv_sec);
    PyObject *billion = PyLong_FromLong(1000000000L);
    PyObject *part = PyLong_FromLong(time.tv_nsec);
    PyObject *scaled = seconds && billion ? PyNumber_Multiply(seconds, billion) : NULL;
    PyObject *total = scaled && part ? PyNumber_Add(scaled, part) : NULL;
    Py_XDECREF(seconds);
    Py_XDECREF(billion);
    Py_XDECREF(part);
    Py_XDECREF(scaled);
    return total;
}

static PyObject *owner(unsigned long id, int unset) {
    return unset ? PyLong_FromLong(-1) : PyLong_FromUnsignedLong(id);  /* as os.stat_result gives (uid_t)-1 */
}

static PyObject *stat_of(const struct stat *info) {
    PyObject *result = PyStructSequence_New(stat_type);
    if (result == NULL)
        return NULL;
    PyObject *values[9] = {
        PyLong_FromUnsignedLong((unsigned long)info->st_mode),
        PyLong_FromUnsignedLongLong((unsigned long long)info->st_ino),
        PyLong_FromUnsignedLongLong((unsigned long long)info->st_dev),
        PyLong_FromUnsignedLong((unsigned long)info->st_nlink),
        owner((unsigned long)info->st_uid, info->st_uid == (uid_t)-1),
        owner((unsigned long)info->st_gid, info->st_gid == (gid_t)-1),
        PyLong_FromLongLong((long long)info->st_size),
        nanoseconds(info->st_mtim),
        nanoseconds(info->st_ctim),
    };
    int complete = 1;
    for (int i = 0; i < 9; i++) {
        if (values[i] == NULL)
            complete = 0;
        PyStructSequence_SET_ITEM(result, i, values[i] != NULL ? values[i] : Py_NewRef(Py_None));
    }
    if (!complete) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

/* lstat_all(fd, names) -> (names, stats): each name lstat'ed relative to the directory open as fd,
 * without following a link; those gone (any failure) are left out of both lists. */
static PyObject *lstat_all(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    int fd;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "lstat_all(fd, names)");
        return NULL;
    }
    if (!descriptor(args[0], &fd))
        return NULL;
    if (!PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "lstat_all: names must be a list");
        return NULL;
    }
    PyObject *names = args[1];
    Py_ssize_t count = PyList_GET_SIZE(names);
    int usable;
    struct stat *infos = PyMem_Malloc(((size_t)count ? (size_t)count : 1) * sizeof(struct stat));
    char *there = PyMem_Malloc((size_t)count ? (size_t)count : 1);
    PyObject **encoded = infos != NULL && there != NULL ? encoded_names(names, count, &usable) : NULL;
    PyObject *kept = NULL, *stats = NULL, *answer = NULL;
    Py_ssize_t gone = 0;
    if (infos == NULL || there == NULL)
        PyErr_NoMemory();
    if (encoded == NULL)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        const char *name = PyBytes_AS_STRING(encoded[i]);
        there[i] = strlen(name) == (size_t)PyBytes_GET_SIZE(encoded[i]) &&
                   fstatat(fd, name, &infos[i], AT_SYMLINK_NOFOLLOW) == 0;
        gone += !there[i];
    }
    Py_END_ALLOW_THREADS
    stats = PyList_New(count - gone);
    kept = gone ? PyList_New(count - gone) : Py_NewRef(names);
    if (stats == NULL || kept == NULL)
        goto done;
    for (Py_ssize_t i = 0, j = 0; i < count; i++) {
        if (!there[i])
            continue;
        PyObject *info = stat_of(&infos[i]);
        if (info == NULL)
            goto done;
        PyList_SET_ITEM(stats, j, info);
        if (gone)
            PyList_SET_ITEM(kept, j, Py_NewRef(PyList_GET_ITEM(names, i)));
        j++;
    }
    answer = PyTuple_Pack(2, kept, stats);
done:
    Py_XDECREF(kept);
    Py_XDECREF(stats);
    free_names(encoded, count);
    PyMem_Free(infos);
    PyMem_Free(there);
    return answer;
}

static PyMethodDef methods[] = {
    {"same_stats", (PyCFunction)(void (*)(void))same_stats, METH_FASTCALL,
     "same_stats(fd, names, columns, values) -> bool\n\n"
     "Whether each of ``names``, lstat'ed relative to the directory open as ``fd`` (no link followed),\n"
     "has for each of ``columns`` (snapshot column names: inode, ctime_ns, mtime_ns, size, nlink, uid,\n"
     "gid) the value at its index in that column's list of ``values``; False on any difference or failure."},
    {"lstat_all", (PyCFunction)(void (*)(void))lstat_all, METH_FASTCALL,
     "lstat_all(fd, names) -> (names, stats)\n\n"
     "Each name lstat'ed relative to the directory open as ``fd`` (no link followed): the names still\n"
     "there and their Stat (os.stat_result's st_mode, st_ino, st_dev, st_nlink, st_uid, st_gid,\n"
     "st_size, st_mtime_ns, st_ctime_ns); ``names`` itself when none is gone."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stat_compare", NULL, 0, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__stat_compare(void) {
    stat_type = PyStructSequence_NewType(&stat_desc);
    if (stat_type == NULL)
        return NULL;
    PyObject *created = PyModule_Create(&module);
    if (created != NULL && PyModule_AddObjectRef(created, "Stat", (PyObject *)stat_type) < 0)
        Py_CLEAR(created);
    return created;
}
