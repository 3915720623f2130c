/* The end walk's one question per trusted directory, asked in C (tree_walk._Walk._as_listed):
 * does the directory list the names the start listed, in their order, and does each child,
 * lstat'ed relative to the directory's descriptor, have the columns (inode, ctime, size) the start
 * recorded?  From Python, listing a directory and an lstat with its stat_result cost ~2.5 us per
 * child (100k children: ~250 ms of CPU); here the system calls alone.  Nothing else: any
 * difference, any failure answers False, and the walk then compares that directory the long way.
 * And lstat_all: the long way's lstat, without the float times and fields the walk never reads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
 * exception set. One that holds a NUL is the caller's to leave out (the kernel would read a shorter name). */
static PyObject **encoded_names(PyObject *names, Py_ssize_t count) {
    PyObject **encoded = PyMem_Calloc((size_t)count ? (size_t)count : 1, sizeof(PyObject *));
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

/* Which of COLUMN_NAMES ``column`` is; 0 with ValueError when none. */
static int known_column(PyObject *column, int *which) {
    const char *name = PyUnicode_Check(column) ? PyUnicode_AsUTF8(column) : NULL;
    for (int known = 0; name != NULL && COLUMN_NAMES[known] != NULL; known++) {
        if (strcmp(name, COLUMN_NAMES[known]) == 0) {
            *which = known;
            return 1;
        }
    }
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError, "a column an lstat does not give");
    return 0;
}

/* The values of ``columns`` (checked names, ``wanted``) for ``count`` children, as C numbers;
 * 0 with an exception set when a value is not an int, or with ``*usable`` 0 when one is out of the
 * range an lstat can give (then nothing compares equal). */
static int column_values(PyObject *values, const int *wanted, Py_ssize_t width, Py_ssize_t count,
                         long long *signs, unsigned long long *unsigns, int *usable) {
    *usable = 1;
    for (Py_ssize_t c = 0; c < width; c++) {
        PyObject *column = PyList_GET_ITEM(values, c);
        int is_signed = wanted[c] == CTIME || wanted[c] == MTIME || wanted[c] == SIZE;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *value = PyList_GET_ITEM(column, i);
            if (!PyLong_Check(value)) {
                PyErr_SetString(PyExc_TypeError, "a column value is not an int");
                return 0;
            }
            if (is_signed)
                signs[c * count + i] = PyLong_AsLongLong(value);
            else
                unsigns[c * count + i] = PyLong_AsUnsignedLongLong(value);
            if (PyErr_Occurred()) {
                PyErr_Clear();
                *usable = 0;
            }
        }
    }
    return 1;
}

/* same_directory(fd, joined, separator, columns, values) -> bool */
static PyObject *same_directory(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    int fd, wanted[MAX_COLUMNS];
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "same_directory(fd, joined, separator, columns, values)");
        return NULL;
    }
    if (!descriptor(args[0], &fd))
        return NULL;
    PyObject *joined = args[1], *separator = args[2], *columns = args[3], *values = args[4];
    if (!PyUnicode_Check(joined) || !PyUnicode_Check(separator) || !PyTuple_Check(columns) || !PyList_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "same_directory: joined and separator str, columns a tuple, values a list");
        return NULL;
    }
    Py_ssize_t width = PyTuple_GET_SIZE(columns);
    if (width < 1 || width > MAX_COLUMNS || PyList_GET_SIZE(values) != width) {
        PyErr_SetString(PyExc_ValueError, "same_directory: one list of values per column, at least one");
        return NULL;
    }
    Py_ssize_t count = -1;
    for (Py_ssize_t c = 0; c < width; c++) {
        if (!known_column(PyTuple_GET_ITEM(columns, c), &wanted[c]))
            return NULL;
        PyObject *column = PyList_GET_ITEM(values, c);
        if (!PyList_Check(column)) {
            PyErr_SetString(PyExc_TypeError, "same_directory: each column's values a list");
            return NULL;
        }
        if (count >= 0 && PyList_GET_SIZE(column) != count)
            Py_RETURN_FALSE;
        count = PyList_GET_SIZE(column);
    }

    PyObject *text = PyUnicode_EncodeFSDefault(joined), *between = PyUnicode_EncodeFSDefault(separator);
    size_t cells = (size_t)(count ? count : 1) * (size_t)width;
    long long *signs = PyMem_Malloc(cells * sizeof(long long));
    unsigned long long *unsigns = PyMem_Malloc(cells * sizeof(unsigned long long));
    PyObject *answer = NULL;
    int same = 1;
    if (signs == NULL || unsigns == NULL)
        PyErr_NoMemory();
    if (text == NULL || between == NULL || signs == NULL || unsigns == NULL ||
        !column_values(values, wanted, width, count, signs, unsigns, &same))
        goto done;
    const char *names = PyBytes_AS_STRING(text), *gap = PyBytes_AS_STRING(between);
    Py_ssize_t length = PyBytes_GET_SIZE(text), gap_length = PyBytes_GET_SIZE(between);
    if (gap_length < 1 || gap[0] != '/' || gap[gap_length - 1] != '/') {
        PyErr_SetString(PyExc_ValueError, "same_directory: the separator is '/', or the directory between two");
        goto done;
    }
    if (same) {
        Py_BEGIN_ALLOW_THREADS
        /* The directory read on a duplicate of fd, rewound before and after: the offset is shared. */
        int copy = dup(fd);
        DIR *directory = copy >= 0 ? fdopendir(copy) : NULL;
        if (directory == NULL) {
            if (copy >= 0)
                close(copy);
            same = 0;
        } else {
            rewinddir(directory);
            Py_ssize_t index = 0, at = 0;
            struct dirent *entry;
            struct stat info;
            for (;;) {
                errno = 0;
                entry = readdir(directory);
                if (entry == NULL) {
                    same = same && errno == 0;  /* a failed read may have hidden names after it */
                    break;
                }
                const char *name = entry->d_name;
                if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
                    continue;
                /* The start's next name: up to the next '/' (in no name), then the separator. */
                size_t size = strlen(name);
                const char *end = at < length ? memchr(names + at, '/', (size_t)(length - at)) : NULL;
                Py_ssize_t stop = end != NULL ? end - names : length;
                if (index >= count || at > length || (size_t)(stop - at) != size || memcmp(names + at, name, size) != 0 ||
                    (end != NULL && (length - stop < gap_length || memcmp(end, gap, (size_t)gap_length) != 0)) ||
                    fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) != 0) {
                    same = 0;
                    break;
                }
                for (Py_ssize_t c = 0; same && c < width; c++) {
                    long long sign = 0;
                    unsigned long long unsign = 0;
                    int is_signed;
                    same = column_of(&info, wanted[c], &sign, &unsign, &is_signed) &&
                           (is_signed ? signs[c * count + index] == sign : unsigns[c * count + index] == unsign);
                }
                index++;
                at = end != NULL ? stop + gap_length : length + 1;
                if (!same)
                    break;
            }
            /* Every name the start held, and no more: a start of n names ends past its text. */
            same = same && index == count && (count == 0 ? length == 0 : at == length + 1);
            rewinddir(directory);
            closedir(directory);
        }
        Py_END_ALLOW_THREADS
    }
    answer = PyBool_FromLong(same);
done:
    Py_XDECREF(text);
    Py_XDECREF(between);
    PyMem_Free(signs);
    PyMem_Free(unsigns);
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
    struct stat *infos = PyMem_Malloc(((size_t)count ? (size_t)count : 1) * sizeof(struct stat));
    char *there = PyMem_Malloc((size_t)count ? (size_t)count : 1);
    PyObject **encoded = infos != NULL && there != NULL ? encoded_names(names, count) : NULL;
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
    {"same_directory", (PyCFunction)(void (*)(void))same_directory, METH_FASTCALL,
     "same_directory(fd, joined, separator, columns, values) -> bool\n\n"
     "Whether the directory open as ``fd`` lists exactly the names of ``joined`` (the start's, in\n"
     "order, each followed by ``separator``: '/', or '/DIRECTORY/'; no '.' or '..'), and each child,\n"
     "lstat'ed, has for each of ``columns`` the value at its index in that column's list of ``values``;\n"
     "False on any difference or failure. The directory is read on a copy of ``fd``, rewound."},
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
