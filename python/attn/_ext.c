/*
 * _ext.c — the CPython extension `attn._ext`: the hot Python entries (paged attention with and without a
 * plan, reshape_and_cache, flash_attn_with_kvcache, dense / varlen attention, merge) as C functions that
 * read NumPy arrays (buffer protocol; bf16/fp8 ml_dtypes arrays through a same-width integer view) and
 * DLPack producers (torch tensors: the `__dlpack__` capsule) straight into attn_tensor views, release the
 * GIL around the libattn call and raise the same AttnError subclasses with the same messages as the ctypes
 * binding (python/attn/_capi.py builds the exception objects; this file only passes status and message).
 *
 * What it deliberately does not do: argument checking with messages. Every entry returns NotImplemented
 * ("take the general path") for any input outside the plain, valid case it handles — a Python list, an
 * index array of another integer width, a read-only output, a bad window, separate key/value caches, ...
 * — BEFORE anything is written; the Python wrapper then runs the ctypes path, which raises exactly the
 * error it always raised. Errors found by libattn itself are raised here (same status, same message).
 *
 * libattn is not linked: python/attn/_binding.py hands over the addresses of the entries of the library
 * that ctypes loaded (so both bindings share one library, one thread-local last error, one attn_ctx).
 * Types are checked against include/attn/attn.h at compile time (ATTN_EXT_CHECK_TYPE).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn/attn.h"

/* ================================================================================================
 * libattn entry points (filled by _init from ctypes addresses)
 * ================================================================================================ */

typedef attn_status (*ext_paged_fn)(attn_ctx *, const attn_tensor *, const attn_tensor *, const attn_tensor *,
                                    const attn_tensor *, const attn_tensor *, const attn_params *, attn_tensor *,
                                    attn_tensor *);
typedef attn_status (*ext_forward_paged_fn)(attn_ctx *, const attn_plan *, const attn_tensor *, const attn_tensor *,
                                            const attn_tensor *, const attn_tensor *, const attn_params *,
                                            attn_tensor *, attn_tensor *, void *, size_t);
typedef attn_status (*ext_cache_fn)(attn_ctx *, const attn_tensor *, const attn_tensor *, attn_tensor *,
                                    const attn_tensor *);
typedef attn_status (*ext_cache_scaled_fn)(attn_ctx *, const attn_tensor *, const attn_tensor *, attn_tensor *,
                                           const attn_tensor *, float, float);
typedef attn_status (*ext_forward_fn)(attn_ctx *, attn_layout, const attn_tensor *, const attn_tensor *,
                                      const attn_tensor *, const attn_params *, attn_tensor *, attn_tensor *);
typedef attn_status (*ext_varlen_fn)(attn_ctx *, const attn_tensor *, const attn_tensor *, const attn_tensor *,
                                     const attn_tensor *, const attn_tensor *, const attn_params *, attn_tensor *,
                                     attn_tensor *);
typedef attn_status (*ext_merge_fn)(attn_ctx *, const attn_tensor *, const attn_tensor *, const attn_tensor *,
                                    const attn_tensor *, attn_tensor *, attn_tensor *);
typedef const char *(*ext_last_error_fn)(void);
typedef void (*ext_clear_error_fn)(void);
typedef void (*ext_params_init_fn)(attn_params *, size_t);
typedef unsigned (*ext_version_fn)(void);

/* Unevaluated check that a typedef matches the header's declaration (nothing is linked). */
#define ATTN_EXT_CHECK_TYPE(fn, type)                                                                                  \
    _Static_assert(_Generic(&fn, type : 1, default : 0), #fn " does not match include/attn/attn.h")
ATTN_EXT_CHECK_TYPE(attn_paged_attention, ext_paged_fn);
ATTN_EXT_CHECK_TYPE(attn_forward_paged, ext_forward_paged_fn);
ATTN_EXT_CHECK_TYPE(attn_reshape_and_cache, ext_cache_fn);
ATTN_EXT_CHECK_TYPE(attn_reshape_and_cache_scaled, ext_cache_scaled_fn);
ATTN_EXT_CHECK_TYPE(attn_forward, ext_forward_fn);
ATTN_EXT_CHECK_TYPE(attn_forward_varlen, ext_varlen_fn);
ATTN_EXT_CHECK_TYPE(attn_merge_attn_states, ext_merge_fn);
ATTN_EXT_CHECK_TYPE(attn_last_error, ext_last_error_fn);
ATTN_EXT_CHECK_TYPE(attn_clear_error, ext_clear_error_fn);
ATTN_EXT_CHECK_TYPE(attn_params_init_sized, ext_params_init_fn);
ATTN_EXT_CHECK_TYPE(attn_version_number, ext_version_fn);

static struct ext_lib {
    ext_paged_fn paged_attention;
    ext_forward_paged_fn forward_paged;
    ext_cache_fn reshape_and_cache;
    ext_cache_scaled_fn reshape_and_cache_scaled; /* optional (fp8 caches): NULL = ctypes fallback */
    ext_forward_fn forward;
    ext_varlen_fn forward_varlen;
    ext_merge_fn merge_attn_states;
    ext_last_error_fn last_error;
    ext_clear_error_fn clear_error;
    attn_params params_default; /* attn_params_init_sized() output (struct_size set), copied per call */
    int ready;
} g_lib;

/* Python objects handed over by _init (strong references, module lifetime). */
static struct ext_py {
    PyObject *ndarray_type;   /* numpy.ndarray                                               */
    PyObject *np_empty;       /* numpy.empty                                                 */
    PyObject *alloc_like;     /* attn._arrays.empty(like, shape, np_dtype): torch-aware       */
    PyObject *make_error;     /* attn._capi.make_error(status, message, function) -> exception */
    PyObject *np_dtype[16];   /* attn dtype -> numpy dtype object (NULL: none)                */
    PyObject *view_dtype[16]; /* bf16/fp8 -> same-width unsigned dtype for the buffer view    */
    PyObject *special[16];    /* numpy dtype objects without a buffer format (ml_dtypes)      */
    int special_attn[16];     /* their attn dtypes                                            */
    int num_special;
    PyObject *torch_tensor;    /* torch.Tensor once torch is imported (NULL before)            */
    PyObject *torch_to_dlpack; /* torch._C._to_dlpack                                           */
    PyObject *s_dlpack, *s_dtype, *s_view, *s_requires_grad, *s_torch; /* interned names        */
} g_py;

#define EXT_FALLBACK 1 /* helper result: input outside the fast path; caller returns NotImplemented */

/* ================================================================================================
 * Tensor arguments
 * ================================================================================================ */

/* One converted argument: the view plus what keeps its memory alive until ext_arg_release(). */
typedef struct ext_arg {
    attn_tensor t;
    Py_buffer view;    /* held buffer (kind 1)                    */
    PyObject *capsule; /* unconsumed DLPack capsule (kind 2)      */
    PyObject *tmp;     /* bf16/fp8 integer view array (kind 1)    */
    int kind;          /* 0 none, 1 buffer, 2 capsule             */
} ext_arg;

/* Releases what `a` holds (safe on a zeroed or already released argument). */
static void ext_arg_release(ext_arg *a) {
    if (a->kind == 1)
        PyBuffer_Release(&a->view);
    Py_CLEAR(a->capsule);
    Py_CLEAR(a->tmp);
    a->kind = 0;
}

/* attn dtype of a PEP 3118 format of `itemsize` bytes: f32/f16/i32/i64/bool/u8, native or '<' order
 * (little-endian hosts). -1 for anything else. */
static int ext_format_dtype(const char *fmt, Py_ssize_t itemsize) {
    if (fmt == NULL)
        return itemsize == 1 ? ATTN_DTYPE_U8 : -1;
    if (fmt[0] == '@' || fmt[0] == '=' || fmt[0] == '<') {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        if (fmt[0] == '<')
            return -1;
#endif
        fmt++;
    }
    if (fmt[0] == '\0' || fmt[1] != '\0')
        return -1;
    switch (fmt[0]) {
    case 'f':
        return itemsize == 4 ? ATTN_DTYPE_F32 : -1;
    case 'e':
        return itemsize == 2 ? ATTN_DTYPE_F16 : -1;
    case 'i':
    case 'l':
    case 'q':
        return itemsize == 4 ? ATTN_DTYPE_I32 : itemsize == 8 ? ATTN_DTYPE_I64 : -1;
    case '?':
        return itemsize == 1 ? ATTN_DTYPE_BOOL : -1;
    case 'B':
        return itemsize == 1 ? ATTN_DTYPE_U8 : -1;
    default:
        return -1;
    }
}

/* a * b of non-negative int64 values into *out; 0 if the product overflows. */
static int ext_mul(int64_t a, int64_t b, int64_t *out) {
    if (b != 0 && a > INT64_MAX / b)
        return 0;
    *out = a * b;
    return 1;
}

/* Fills a->t's shape and strides (bytes in, elements out) as python/attn/_arrays.tensor does: a size-0/1
 * dimension's unusable stride becomes 0 (1 for the last); a negative or misaligned stride is a fallback.
 * So is a view whose sizes or addresses do not fit in int64 (a negative size, a product of sizes, or the
 * byte offset of its last element, also for empty views): every index computation here and in libattn then
 * stays in range, and the general path reports the argument. */
static int ext_set_dims(ext_arg *a, int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides_bytes,
                        const int64_t *strides_elems, Py_ssize_t item) {
    if (ndim < 0 || ndim > ATTN_MAX_DIMS)
        return EXT_FALLBACK;
    a->t.ndim = ndim;
    int64_t acc = 1;
    for (int i = ndim - 1; i >= 0; i--) { /* default: C-contiguous */
        if (shape[i] < 0)
            return EXT_FALLBACK;
        a->t.strides[i] = acc;
        if (!ext_mul(acc, shape[i] > 1 ? (int64_t)shape[i] : 1, &acc))
            return EXT_FALLBACK;
    }
    int64_t end = 1; /* elements up to and including the last one */
    if (!ext_mul(acc, (int64_t)item, &acc))
        return EXT_FALLBACK;
    for (int i = 0; i < ndim; i++) {
        a->t.shape[i] = shape[i];
        int64_t s;
        if (strides_bytes != NULL) {
            s = strides_bytes[i];
            if (shape[i] <= 1 && (i == ndim - 1 || s < 0 || s % item))
                s = i == ndim - 1 ? item : 0;
            if (s < 0 || s % item)
                return EXT_FALLBACK;
            a->t.strides[i] = s / item;
        } else if (strides_elems != NULL) {
            s = strides_elems[i];
            if (shape[i] <= 1 && (i == ndim - 1 || s < 0))
                s = i == ndim - 1 ? 1 : 0;
            if (s < 0)
                return EXT_FALLBACK;
            a->t.strides[i] = s;
        }
        int64_t span;
        if (shape[i] > 0) {
            if (!ext_mul(shape[i] - 1, a->t.strides[i], &span) || span > INT64_MAX - end)
                return EXT_FALLBACK;
            end += span;
        }
    }
    return ext_mul(end, (int64_t)item, &end) ? 0 : EXT_FALLBACK;
}

/* NumPy array -> view through the buffer protocol. bf16/fp8 (ml_dtypes: no buffer format) go through
 * `x.view(uint16/uint8)`, which shares the memory. Fallback for any other dtype or a read-only array when
 * `writable`. */
static int ext_from_ndarray(PyObject *obj, int writable, ext_arg *a) {
    const int flags = writable ? PyBUF_RECORDS : PyBUF_RECORDS_RO;
    PyObject *src = obj;
    int dtype = -1;
    if (PyObject_GetBuffer(obj, &a->view, flags) == 0) {
        dtype = ext_format_dtype(a->view.format, a->view.itemsize);
        if (dtype < 0) {
            PyBuffer_Release(&a->view);
            return EXT_FALLBACK;
        }
    } else {
        PyErr_Clear();
        PyObject *dt = PyObject_GetAttr(obj, g_py.s_dtype);
        if (dt == NULL) {
            PyErr_Clear();
            return EXT_FALLBACK;
        }
        for (int i = 0; i < g_py.num_special; i++) {
            if (g_py.special[i] == dt)
                dtype = g_py.special_attn[i];
        }
        Py_DECREF(dt);
        if (dtype < 0 || dtype >= 16 || g_py.view_dtype[dtype] == NULL)
            return EXT_FALLBACK;
        src = PyObject_CallMethodOneArg(obj, g_py.s_view, g_py.view_dtype[dtype]);
        if (src == NULL) {
            PyErr_Clear();
            return EXT_FALLBACK;
        }
        if (PyObject_GetBuffer(src, &a->view, flags) != 0) {
            PyErr_Clear();
            Py_DECREF(src);
            return EXT_FALLBACK;
        }
        a->tmp = src;
    }
    a->kind = 1;
    a->t.data = a->view.buf;
    a->t.dtype = (attn_dtype)dtype;
    return ext_set_dims(a, a->view.ndim, a->view.shape, a->view.strides, NULL, a->view.itemsize);
}

/* The DLPack ABI (dlpack.h, v0.x "dltensor" capsule; written from the public specification). */
typedef struct ext_dl_device {
    int32_t device_type, device_id;
} ext_dl_device;
typedef struct ext_dl_dtype {
    uint8_t code, bits;
    uint16_t lanes;
} ext_dl_dtype;
typedef struct ext_dl_tensor {
    void *data;
    ext_dl_device device;
    int32_t ndim;
    ext_dl_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* elements; NULL = compact row-major */
    uint64_t byte_offset;
} ext_dl_tensor;
typedef struct ext_dl_managed {
    ext_dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct ext_dl_managed *);
} ext_dl_managed;
enum {
    EXT_DL_INT = 0,
    EXT_DL_UINT = 1,
    EXT_DL_FLOAT = 2,
    EXT_DL_BFLOAT = 4,
    EXT_DL_BOOL = 6,
    EXT_DL_F8_E4M3FN = 10,
    EXT_DL_F8_E5M2 = 12,
    EXT_DL_CPU = 1,
    EXT_DL_CUDA_HOST = 3
};

/* attn dtype of a DLPack dtype, -1 if attn has none. */
static int ext_dl_attn_dtype(ext_dl_dtype d) {
    if (d.lanes != 1)
        return -1;
    switch (d.code) {
    case EXT_DL_FLOAT:
        return d.bits == 32 ? ATTN_DTYPE_F32 : d.bits == 16 ? ATTN_DTYPE_F16 : -1;
    case EXT_DL_BFLOAT:
        return d.bits == 16 ? ATTN_DTYPE_BF16 : -1;
    case EXT_DL_INT:
        return d.bits == 32 ? ATTN_DTYPE_I32 : d.bits == 64 ? ATTN_DTYPE_I64 : -1;
    case EXT_DL_UINT:
        return d.bits == 8 ? ATTN_DTYPE_U8 : -1;
    case EXT_DL_BOOL:
        return d.bits == 8 ? ATTN_DTYPE_BOOL : -1;
    case EXT_DL_F8_E4M3FN:
        return d.bits == 8 ? ATTN_DTYPE_FP8_E4M3 : -1;
    case EXT_DL_F8_E5M2:
        return d.bits == 8 ? ATTN_DTYPE_FP8_E5M2 : -1;
    default:
        return -1;
    }
}

/* DLPack producer -> view. The capsule stays unconsumed and is kept until release: its destructor calls
 * the producer's deleter (as python/attn/_arrays._DLPackView does). A producer that refuses (torch
 * requires_grad, read-only NumPy) or a non-CPU device is a fallback: the Python path warns / raises. */
static int ext_from_capsule(PyObject *cap, ext_arg *a);

static int ext_from_dlpack(PyObject *obj, ext_arg *a) {
    PyObject *cap = PyObject_CallMethodNoArgs(obj, g_py.s_dlpack);
    if (cap == NULL) {
        PyErr_Clear();
        return EXT_FALLBACK;
    }
    return ext_from_capsule(cap, a);
}

/* torch.Tensor -> view through torch._C._to_dlpack, the C function Tensor.__dlpack__ ends in (that Python
 * method alone costs ~2 µs). The checks __dlpack__ makes first are kept: requires_grad is a fallback (the
 * Python path warns once and reads a detached view); a conjugate bit needs a complex dtype and a non-strided
 * layout has no data pointer, both refused below. */
static int ext_from_torch(PyObject *obj, ext_arg *a) {
    PyObject *rg = PyObject_GetAttr(obj, g_py.s_requires_grad);
    if (rg == NULL) {
        PyErr_Clear();
        return EXT_FALLBACK;
    }
    const int needs_grad = rg != Py_False;
    Py_DECREF(rg);
    if (needs_grad)
        return EXT_FALLBACK;
    PyObject *cap = PyObject_CallOneArg(g_py.torch_to_dlpack, obj);
    if (cap == NULL) {
        PyErr_Clear();
        return EXT_FALLBACK;
    }
    return ext_from_capsule(cap, a);
}

/* Takes over the reference `cap` ("dltensor" capsule, unconsumed) and describes its tensor in `a`. */
static int ext_from_capsule(PyObject *cap, ext_arg *a) {
    ext_dl_managed *m = (ext_dl_managed *)PyCapsule_GetPointer(cap, "dltensor");
    if (m == NULL) {
        PyErr_Clear();
        Py_DECREF(cap);
        return EXT_FALLBACK;
    }
    a->capsule = cap;
    a->kind = 2;
    const ext_dl_tensor *t = &m->dl_tensor;
    const int dtype = ext_dl_attn_dtype(t->dtype);
    if (dtype < 0 || (t->device.device_type != EXT_DL_CPU && t->device.device_type != EXT_DL_CUDA_HOST) ||
        t->ndim < 0 || t->ndim > ATTN_MAX_DIMS || (t->ndim > 0 && t->shape == NULL))
        return EXT_FALLBACK;
    Py_ssize_t shape[ATTN_MAX_DIMS];
    int empty = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || t->shape[i] > PY_SSIZE_T_MAX)
            return EXT_FALLBACK;
        shape[i] = (Py_ssize_t)t->shape[i];
        empty |= shape[i] == 0;
    }
    a->t.dtype = (attn_dtype)dtype;
    const int r = ext_set_dims(a, t->ndim, shape, NULL, t->strides, 1);
    if (r != 0)
        return r;
    /* data NULL: only an empty view has no memory (no address is formed from it); one with elements is a
     * fallback, where python/attn/_arrays.py names the argument */
    if (t->data == NULL) {
        if (!empty)
            return EXT_FALLBACK;
        a->t.data = NULL;
    } else {
        a->t.data = (void *)((uintptr_t)t->data + (uintptr_t)t->byte_offset);
    }
    return 0;
}

/* Any array argument -> view. `want` >= 0 requires that dtype (index arrays); float arguments accept any
 * attn dtype (libattn checks). Only numpy.ndarray (and subclasses) and objects with __dlpack__ are taken;
 * everything else (lists, scalars, memoryviews) is a fallback, as np.asarray may copy or reinterpret. */
/* Caches torch.Tensor and torch._C._to_dlpack once torch has been imported (by the caller: never here). */
static void ext_find_torch(void) {
    PyObject *torch = PyImport_GetModule(g_py.s_torch);
    if (torch == NULL) {
        PyErr_Clear();
        return;
    }
    PyObject *tensor = PyObject_GetAttrString(torch, "Tensor");
    PyObject *c = tensor ? PyObject_GetAttrString(torch, "_C") : NULL;
    PyObject *to = c ? PyObject_GetAttrString(c, "_to_dlpack") : NULL;
    if (tensor && to && PyType_Check(tensor)) {
        g_py.torch_tensor = tensor;
        g_py.torch_to_dlpack = to;
        tensor = to = NULL;
    }
    PyErr_Clear();
    Py_XDECREF(tensor);
    Py_XDECREF(c);
    Py_XDECREF(to);
    Py_DECREF(torch);
}

static int ext_tensor(PyObject *obj, int writable, int want, ext_arg *a) {
    int r;
    if (PyObject_TypeCheck(obj, (PyTypeObject *)g_py.ndarray_type)) {
        r = ext_from_ndarray(obj, writable, a);
    } else if (obj == Py_None) {
        r = EXT_FALLBACK;
    } else if ((g_py.torch_tensor != NULL || (ext_find_torch(), g_py.torch_tensor != NULL)) &&
               PyObject_TypeCheck(obj, (PyTypeObject *)g_py.torch_tensor)) {
        r = ext_from_torch(obj, a);
    } else if (PyObject_HasAttr(obj, g_py.s_dlpack)) {
        r = ext_from_dlpack(obj, a);
    } else {
        r = EXT_FALLBACK;
    }
    if (r == 0 && want >= 0 && (int)a->t.dtype != want)
        r = EXT_FALLBACK;
    return r;
}

/* Optional tensor: None -> *p = NULL. */
static int ext_opt_tensor(PyObject *obj, int writable, int want, ext_arg *a, attn_tensor **p) {
    if (obj == Py_None) {
        *p = NULL;
        return 0;
    }
    *p = &a->t;
    return ext_tensor(obj, writable, want, a);
}

/* A new array of `shape` and attn `dtype` like `like` (a torch tensor for a torch `like`, else NumPy),
 * converted to a writable view in `a`. Returns the new reference or NULL with a Python error set. */
static PyObject *ext_alloc(PyObject *like, int ndim, const int64_t *shape, int dtype, ext_arg *a) {
    PyObject *tshape = PyTuple_New(ndim);
    if (tshape == NULL)
        return NULL;
    for (int i = 0; i < ndim; i++) {
        PyObject *n = PyLong_FromLongLong(shape[i]);
        if (n == NULL) {
            Py_DECREF(tshape);
            return NULL;
        }
        PyTuple_SET_ITEM(tshape, i, n);
    }
    PyObject *np_dt = (dtype >= 0 && dtype < 16) ? g_py.np_dtype[dtype] : NULL;
    if (np_dt == NULL) {
        Py_DECREF(tshape);
        PyErr_SetString(PyExc_TypeError, "attn._ext: no NumPy dtype for an output");
        return NULL;
    }
    PyObject *res;
    if (PyObject_TypeCheck(like, (PyTypeObject *)g_py.ndarray_type)) {
        PyObject *args[2] = {tshape, np_dt};
        res = PyObject_Vectorcall(g_py.np_empty, args, 2, NULL);
    } else {
        PyObject *args[3] = {like, tshape, np_dt};
        res = PyObject_Vectorcall(g_py.alloc_like, args, 3, NULL);
    }
    Py_DECREF(tshape);
    if (res == NULL)
        return NULL;
    if (ext_tensor(res, 1, dtype, a) != 0) {
        Py_DECREF(res);
        PyErr_SetString(PyExc_RuntimeError, "attn._ext: cannot view a freshly allocated output");
        return NULL;
    }
    return res;
}

/* ================================================================================================
 * Options (attn_params) and scalars
 * ================================================================================================ */

/* float or None (-> dflt). Python floats and ints only (anything else: fallback, Python converts). */
static int ext_float(PyObject *o, float dflt, float *out) {
    if (o == Py_None) {
        *out = dflt;
        return 0;
    }
    if (PyFloat_CheckExact(o)) {
        *out = (float)PyFloat_AS_DOUBLE(o);
        return 0;
    }
    if (PyLong_CheckExact(o)) {
        const double d = PyLong_AsDouble(o);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return EXT_FALLBACK;
        }
        *out = (float)d;
        return 0;
    }
    return EXT_FALLBACK;
}

/* A Python int (not bool) in [lo, hi]; anything else is a fallback. */
static int ext_int(PyObject *o, long long lo, long long hi, long long *out) {
    if (!PyLong_CheckExact(o))
        return EXT_FALLBACK;
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return EXT_FALLBACK;
    }
    if (v < lo || v > hi)
        return EXT_FALLBACK;
    *out = v;
    return 0;
}

/* causal as ops._causal_value (flash = 0: None/bool/0/1/2) or flash._flash_causal (flash = 1: None/bool/0/1;
 * True = bottom-right). Strings and NumPy scalars: fallback. */
static int ext_causal(PyObject *o, int flash, int32_t *out) {
    if (o == Py_None || o == Py_False) {
        *out = ATTN_CAUSAL_NONE;
        return 0;
    }
    if (o == Py_True) {
        *out = ATTN_CAUSAL_BOTTOM_RIGHT;
        return 0;
    }
    long long v;
    if (ext_int(o, 0, flash ? 1 : 2, &v) != 0)
        return EXT_FALLBACK;
    *out = (int32_t)v;
    return 0;
}

/* window_size as ops._window_value: None or a tuple/list of two Python ints >= -1; a bound > INT32_MAX is
 * unbounded (-1). */
static int ext_window(PyObject *o, int32_t *left, int32_t *right) {
    if (o == Py_None) {
        *left = *right = -1;
        return 0;
    }
    if (!(PyTuple_CheckExact(o) || PyList_CheckExact(o)) || PySequence_Fast_GET_SIZE(o) != 2)
        return EXT_FALLBACK;
    int32_t *dst[2] = {left, right};
    for (int i = 0; i < 2; i++) {
        PyObject *w = PySequence_Fast_GET_ITEM(o, i);
        if (!PyLong_CheckExact(w))
            return EXT_FALLBACK;
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(w, &overflow);
        if (overflow < 0 || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return EXT_FALLBACK;
        }
        if (overflow > 0 || v > INT32_MAX) {
            *dst[i] = -1;
        } else if (v < -1) {
            return EXT_FALLBACK;
        } else {
            *dst[i] = (int32_t)v;
        }
    }
    return 0;
}

/* Per-head float32 vector (alibi_slopes, sinks): None, or a contiguous 1-D float32 array of num_heads
 * entries (num_heads < 0: unknown, fallback as the Python check needs it). */
static int ext_per_head(PyObject *o, int64_t num_heads, ext_arg *a, const float **out) {
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    if (num_heads < 0 || ext_tensor(o, 0, ATTN_DTYPE_F32, a) != 0)
        return EXT_FALLBACK;
    if (a->t.ndim != 1 || a->t.shape[0] != num_heads || (num_heads > 1 && a->t.strides[0] != 1))
        return EXT_FALLBACK;
    *out = (const float *)a->t.data;
    return 0;
}

/* The options every attention entry shares -> attn_params. keep[0..1] hold the per-head arrays. */
static int ext_params(PyObject *scale, PyObject *causal, int flash_causal, PyObject *window, PyObject *softcap,
                      PyObject *alibi, PyObject *sinks, int64_t num_heads, ext_arg keep[2], attn_params *p) {
    *p = g_lib.params_default;
    if (ext_float(scale, 0.0f, &p->softmax_scale) || ext_causal(causal, flash_causal, &p->causal) ||
        ext_window(window, &p->window_left, &p->window_right) || ext_float(softcap, 0.0f, &p->softcap) ||
        ext_per_head(alibi, num_heads, &keep[0], &p->alibi_slopes) ||
        ext_per_head(sinks, num_heads, &keep[1], &p->sinks))
        return EXT_FALLBACK;
    /* softmax_scale=0.0 means a zero scale (flash-attn, SDPA): every logit 0, uniform weights over the visible
     * keys. attn_params' 0 means "default", so the smallest positive float stands for it (ops.Params does the
     * same): its logits are below 2^-126, exp2 of their differences is exactly 1. */
    if (scale != Py_None && p->softmax_scale == 0.0f) p->softmax_scale = FLT_TRUE_MIN;
    return 0;
}

/* ctx / plan handles: Python ints (0 = closed: fallback raises the Python error). */
static int ext_handle(PyObject *o, void **out) {
    if (!PyLong_CheckExact(o))
        return EXT_FALLBACK;
    *out = PyLong_AsVoidPtr(o);
    if (*out == NULL) {
        PyErr_Clear();
        return EXT_FALLBACK;
    }
    return 0;
}

/* fp8 KV cache arguments: code (None, or the attn dtype FP8_E4M3 / FP8_E5M2 that a uint8 cache holds,
 * vLLM's allocation), k_scale, v_scale (floats). Retags `cache` (and the optional rows of the same dtype) and sets
 * the scales of *p (when p is given). Fallback for anything else (the general path raises). */
static int ext_fp8_cache(PyObject *code, PyObject *ks, PyObject *vs, attn_tensor *cache, attn_tensor *rows_a,
                         attn_tensor *rows_b, float *k_scale, float *v_scale) {
    long long c = -1;
    if (code != Py_None) {
        if (!PyLong_CheckExact(code))
            return EXT_FALLBACK;
        c = PyLong_AsLongLong(code);
        if (c != ATTN_DTYPE_FP8_E4M3 && c != ATTN_DTYPE_FP8_E5M2) {
            PyErr_Clear();
            return EXT_FALLBACK;
        }
        attn_tensor *ts[3] = {cache, rows_a, rows_b};
        for (int i = 0; i < 3; i++) {
            if (ts[i] == NULL)
                continue;
            if (ts[i]->dtype != ATTN_DTYPE_U8 && ts[i]->dtype != (attn_dtype)c)
                return EXT_FALLBACK;
            ts[i]->dtype = (attn_dtype)c;
        }
    }
    if (cache->dtype != ATTN_DTYPE_FP8_E4M3 && cache->dtype != ATTN_DTYPE_FP8_E5M2)
        return EXT_FALLBACK;
    return ext_float(ks, 1.0f, k_scale) || ext_float(vs, 1.0f, v_scale) ? EXT_FALLBACK : 0;
}

/* ================================================================================================
 * Calls and errors
 * ================================================================================================ */

/* Sets the AttnError subclass of a non-OK status with this thread's attn_last_error() (the exception
 * object comes from attn._capi.make_error, so classes and text match the ctypes path). Returns NULL. */
static PyObject *ext_raise(attn_status status, const char *function) {
    const char *msg = g_lib.last_error();
    if (msg == NULL)
        msg = "";
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (text == NULL)
        return NULL;
    PyObject *exc = PyObject_CallFunction(g_py.make_error, "iOs", (int)status, text, function);
    Py_DECREF(text);
    if (exc == NULL)
        return NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

#define EXT_CALL(status, expr)                                                                                         \
    do {                                                                                                               \
        Py_BEGIN_ALLOW_THREADS;                                                                                        \
        g_lib.clear_error();                                                                                           \
        (status) = (expr);                                                                                             \
        Py_END_ALLOW_THREADS;                                                                                          \
    } while (0)

static void ext_release_all(ext_arg *args, int n) {
    for (int i = 0; i < n; i++)
        ext_arg_release(&args[i]);
}

/* out, or (out, lse) when want_lse. Steals both references. */
static PyObject *ext_result(PyObject *out, PyObject *lse, int want_lse) {
    if (!want_lse) {
        Py_XDECREF(lse);
        return out;
    }
    if (lse == NULL) {
        lse = Py_None;
        Py_INCREF(lse);
    }
    PyObject *r = PyTuple_Pack(2, out, lse);
    Py_DECREF(out);
    Py_DECREF(lse);
    return r;
}

static PyObject *ext_not_implemented(ext_arg *args, int n) {
    ext_release_all(args, n);
    Py_RETURN_NOTIMPLEMENTED;
}

#define EXT_NARGS(name, want)                                                                                          \
    if (nargs != (want)) {                                                                                             \
        PyErr_Format(PyExc_TypeError, "attn._ext." name " takes %d arguments (%zd given)", (int)(want), nargs);        \
        return NULL;                                                                                                   \
    }

/* Output `out` (given or allocated like `like` with `shape` and dtype `dtype`) and optional LSE
 * (given, allocated float32 `lse_shape`, or none). On success *out_obj / *lse_obj are new references. */
static int ext_outputs(PyObject *like, PyObject *out, int ndim, const int64_t *shape, int dtype, PyObject *lse,
                       int want_lse, int lse_ndim, const int64_t *lse_shape, ext_arg *ao, ext_arg *al,
                       PyObject **out_obj, PyObject **lse_obj, attn_tensor **lse_t) {
    *out_obj = *lse_obj = NULL;
    *lse_t = NULL;
    if ((out == Py_None && (dtype < 0 || dtype >= 16 || g_py.np_dtype[dtype] == NULL)) ||
        (want_lse && lse == Py_None && g_py.np_dtype[ATTN_DTYPE_F32] == NULL))
        return EXT_FALLBACK; /* an output dtype NumPy cannot hold here: the general path says so */
    if (out != Py_None) {
        if (ext_tensor(out, 1, -1, ao) != 0)
            return EXT_FALLBACK;
        Py_INCREF(out);
        *out_obj = out;
    }
    if (want_lse && lse != Py_None) {
        if (ext_tensor(lse, 1, -1, al) != 0)
            return EXT_FALLBACK;
        Py_INCREF(lse);
        *lse_obj = lse;
        *lse_t = &al->t;
    }
    if (*out_obj == NULL) {
        *out_obj = ext_alloc(like, ndim, shape, dtype, ao);
        if (*out_obj == NULL)
            return -1;
    }
    if (want_lse && *lse_obj == NULL && lse_ndim > 0) {
        *lse_obj = ext_alloc(like, lse_ndim, lse_shape, ATTN_DTYPE_F32, al);
        if (*lse_obj == NULL)
            return -1;
        *lse_t = &al->t;
        /* -inf where no call writes (rows outside every sequence), as out is 0 there (ext_alloc zero-fills) */
        int64_t n = 1;
        for (int i = 0; i < lse_ndim; i++) n *= lse_shape[i];
        float *d = (float *)al->t.data;
        for (int64_t i = 0; i < n; i++) d[i] = -INFINITY;
    }
    return 0;
}

/* ================================================================================================
 * Entries (METH_FASTCALL; argument order fixed by python/attn/ops.py, flash.py, vllm_ops.py)
 * ================================================================================================ */

/* paged_attention(ctx, q, kv_cache, query_start_loc, seq_lens, block_table, softmax_scale, causal,
 *                 window_size, softcap, alibi_slopes, sinks, out, lse, want_lse)
 * q [num_tokens, num_heads, head_size]; kv_cache [2, num_blocks, block_size, num_kv_heads, head_size];
 * query_start_loc / seq_lens / block_table int32. out like q (allocated if None); lse float32 [num_heads,
 * num_tokens]. Returns out or (out, lse); NotImplemented outside the fast path. */
static PyObject *ext_paged_attention(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 18) /* 18: + kv_cache_dtype code, k_scale, v_scale of an fp8 cache */
        EXT_NARGS("paged_attention", 15);
    enum { Q, KV, QSL, SL, BT, OUT, LSE, AL, SI, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx;
    attn_params p;
    PyObject *out = NULL, *lse = NULL;
    attn_tensor *lse_t;
    const int want_lse = PyObject_IsTrue(args[14]);
    if (want_lse < 0)
        return NULL; /* its truth value raised (e.g. a NumPy array): that error */
    if (ext_handle(args[0], &ctx) || ext_tensor(args[1], 0, -1, &a[Q]) || ext_tensor(args[2], 0, -1, &a[KV]) ||
        ext_tensor(args[3], 0, ATTN_DTYPE_I32, &a[QSL]) || ext_tensor(args[4], 0, ATTN_DTYPE_I32, &a[SL]) ||
        ext_tensor(args[5], 0, ATTN_DTYPE_I32, &a[BT]))
        return ext_not_implemented(a, N);
    const attn_tensor *q = &a[Q].t;
    const int64_t num_heads = q->ndim == 3 ? q->shape[1] : -1;
    ext_arg keep[2];
    memset(keep, 0, sizeof keep);
    if (ext_params(args[6], args[7], 0, args[8], args[9], args[10], args[11], num_heads, keep, &p)) {
        ext_release_all(keep, 2);
        return ext_not_implemented(a, N);
    }
    a[AL] = keep[0];
    a[SI] = keep[1];
    if (nargs == 18 && ext_fp8_cache(args[15], args[16], args[17], &a[KV].t, NULL, NULL, &p.k_scale, &p.v_scale))
        return ext_not_implemented(a, N);
    const int64_t lse_shape[2] = {q->ndim == 3 ? q->shape[1] : 0, q->shape[0]};
    int r = ext_outputs(args[1], args[12], q->ndim, q->shape, q->dtype, args[13], want_lse, q->ndim == 3 ? 2 : 0,
                        lse_shape, &a[OUT], &a[LSE], &out, &lse, &lse_t);
    if (r != 0) {
        Py_XDECREF(out);
        Py_XDECREF(lse);
        if (r < 0) {
            ext_release_all(a, N);
            return NULL;
        }
        return ext_not_implemented(a, N);
    }
    attn_status st;
    EXT_CALL(st,
             g_lib.paged_attention((attn_ctx *)ctx, q, &a[KV].t, &a[QSL].t, &a[SL].t, &a[BT].t, &p, &a[OUT].t, lse_t));
    ext_release_all(a, N);
    if (st != ATTN_STATUS_OK) {
        Py_DECREF(out);
        Py_XDECREF(lse);
        return ext_raise(st, "attn_paged_attention");
    }
    return ext_result(out, lse, want_lse);
}

/* forward_paged(ctx, plan, num_heads, q, kv_cache, key, value, softmax_scale, causal, window_size, softcap,
 *               alibi_slopes, sinks, out, lse, want_lse, workspace_ptr, workspace_size)
 * One layer of a planned step (attn_forward_paged); shapes as paged_attention, key/value optional
 * [num_tokens, num_kv_heads, head_size]. The workspace is the Plan's (allocated once per plan). */
static PyObject *ext_forward_paged(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 21) /* 21: + kv_cache_dtype code, k_scale, v_scale of an fp8 cache */
        EXT_NARGS("forward_paged", 18);
    enum { Q, KV, K, V, OUT, LSE, AL, SI, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx, *plan;
    attn_tensor *tk, *tv, *lse_t;
    attn_params p;
    PyObject *out = NULL, *lse = NULL;
    long long num_heads, ws_size;
    void *ws = NULL;
    const int want_lse = PyObject_IsTrue(args[15]);
    if (want_lse < 0)
        return NULL; /* its truth value raised (e.g. a NumPy array): that error */
    if (ext_handle(args[0], &ctx) || ext_handle(args[1], &plan) || ext_int(args[2], 0, INT32_MAX, &num_heads) ||
        ext_tensor(args[3], 0, -1, &a[Q]) || ext_tensor(args[4], 0, -1, &a[KV]) ||
        ext_opt_tensor(args[5], 0, -1, &a[K], &tk) || ext_opt_tensor(args[6], 0, -1, &a[V], &tv) ||
        ext_int(args[17], 0, LLONG_MAX, &ws_size) || (ws_size > 0 && ext_handle(args[16], &ws)))
        return ext_not_implemented(a, N);
    /* libattn reads params->alibi_slopes / sinks for q's heads: the per-head arrays are checked against
     * those, and a num_heads (the plan's) that disagrees with q is the general path's error to report */
    const attn_tensor *q = &a[Q].t;
    if (q->ndim != 3 || q->shape[1] != num_heads)
        return ext_not_implemented(a, N);
    ext_arg keep[2];
    memset(keep, 0, sizeof keep);
    if (ext_params(args[7], args[8], 0, args[9], args[10], args[11], args[12], q->shape[1], keep, &p)) {
        ext_release_all(keep, 2);
        return ext_not_implemented(a, N);
    }
    a[AL] = keep[0];
    a[SI] = keep[1];
    if (nargs == 21 && ext_fp8_cache(args[18], args[19], args[20], &a[KV].t, tk, tv, &p.k_scale, &p.v_scale))
        return ext_not_implemented(a, N);
    const int64_t lse_shape[2] = {q->shape[1], q->shape[0]};
    int r = ext_outputs(args[3], args[13], q->ndim, q->shape, q->dtype, args[14], want_lse, 2, lse_shape, &a[OUT],
                        &a[LSE], &out, &lse, &lse_t);
    if (r != 0) {
        Py_XDECREF(out);
        Py_XDECREF(lse);
        if (r < 0) {
            ext_release_all(a, N);
            return NULL;
        }
        return ext_not_implemented(a, N);
    }
    attn_status st;
    EXT_CALL(st, g_lib.forward_paged((attn_ctx *)ctx, (const attn_plan *)plan, q, tk, tv, &a[KV].t, &p, &a[OUT].t,
                                     lse_t, ws, (size_t)ws_size));
    ext_release_all(a, N);
    if (st != ATTN_STATUS_OK) {
        Py_DECREF(out);
        Py_XDECREF(lse);
        return ext_raise(st, "attn_forward_paged");
    }
    return ext_result(out, lse, want_lse);
}

/* reshape_and_cache(ctx, key, value, kv_cache, slot_mapping)
 * key/value [num_tokens, num_kv_heads, head_size]; kv_cache [2, num_blocks, block_size, num_kv_heads,
 * head_size] (written in place); slot_mapping int64 [num_tokens]. Returns None. */
static PyObject *ext_reshape_and_cache(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) /* 8: + kv_cache_dtype code, k_scale, v_scale of an fp8 cache (attn_reshape_and_cache_scaled) */
        EXT_NARGS("reshape_and_cache", 5);
    ext_arg a[4];
    memset(a, 0, sizeof a);
    void *ctx;
    float ks = 1.0f, vs = 1.0f;
    if (ext_handle(args[0], &ctx) || ext_tensor(args[4], 0, ATTN_DTYPE_I64, &a[3]) ||
        ext_tensor(args[1], 0, -1, &a[0]) || ext_tensor(args[2], 0, -1, &a[1]) || ext_tensor(args[3], 1, -1, &a[2]) ||
        (nargs == 8 && (g_lib.reshape_and_cache_scaled == NULL ||
                        ext_fp8_cache(args[5], args[6], args[7], &a[2].t, NULL, NULL, &ks, &vs))))
        return ext_not_implemented(a, 4);
    attn_status st;
    if (nargs == 8)
        EXT_CALL(st, g_lib.reshape_and_cache_scaled((attn_ctx *)ctx, &a[0].t, &a[1].t, &a[2].t, &a[3].t, ks, vs));
    else
        EXT_CALL(st, g_lib.reshape_and_cache((attn_ctx *)ctx, &a[0].t, &a[1].t, &a[2].t, &a[3].t));
    ext_release_all(a, 4);
    if (st != ATTN_STATUS_OK)
        return ext_raise(st, "attn_reshape_and_cache");
    Py_RETURN_NONE;
}

/* The [2, ...] view of two cache halves k (first) and v as python/attn/flash._kv_view builds it: same dtype,
 * shape and strides, v a whole number of elements after k and no later than k's extent. 0 if possible. */
static int ext_kv_view(const attn_tensor *k, const attn_tensor *v, attn_tensor *kv) {
    if (k->dtype != v->dtype || k->ndim != v->ndim || k->ndim + 1 > ATTN_MAX_DIMS)
        return EXT_FALLBACK;
    const int64_t item = (int64_t)(k->dtype == ATTN_DTYPE_F32                                    ? 4
                                   : k->dtype == ATTN_DTYPE_I64                                  ? 8
                                   : (k->dtype == ATTN_DTYPE_F16 || k->dtype == ATTN_DTYPE_BF16) ? 2
                                                                                                 : 1);
    int64_t extent = 1;
    for (int i = 0; i < k->ndim; i++) {
        if (k->shape[i] != v->shape[i])
            return EXT_FALLBACK;
        if (k->shape[i] > 1 && k->strides[i] != v->strides[i])
            return EXT_FALLBACK;
        if (k->shape[i] == 0)
            return EXT_FALLBACK; /* (empty: the general path decides) */
        extent += (k->shape[i] - 1) * k->strides[i];
    }
    const intptr_t delta = (const char *)v->data - (const char *)k->data;
    if (delta < 0 || delta % item || delta / item > extent)
        return EXT_FALLBACK;
    kv->data = k->data;
    kv->dtype = k->dtype;
    kv->ndim = k->ndim + 1;
    kv->shape[0] = 2;
    kv->strides[0] = (int64_t)(delta / item);
    for (int i = 0; i < k->ndim; i++) {
        kv->shape[i + 1] = k->shape[i];
        kv->strides[i + 1] = k->strides[i];
    }
    return 0;
}

/* vllm_reshape_and_cache(ctx, key, value, key_cache, value_cache, slot_mapping)
 * key_cache/value_cache [num_blocks, block_size, num_kv_heads, head_size] that are the halves of one
 * [2, ...] tensor (vLLM's allocation): one attn_reshape_and_cache. Separate caches: NotImplemented. */
static PyObject *ext_vllm_reshape_and_cache(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) /* 9: + kv_cache_dtype code, k_scale, v_scale of an fp8 cache */
        EXT_NARGS("vllm_reshape_and_cache", 6);
    ext_arg a[5];
    memset(a, 0, sizeof a);
    void *ctx;
    attn_tensor kv;
    float ks = 1.0f, vs = 1.0f;
    if (ext_handle(args[0], &ctx) || ext_tensor(args[5], 0, ATTN_DTYPE_I64, &a[4]) ||
        ext_tensor(args[3], 1, -1, &a[2]) || ext_tensor(args[4], 1, -1, &a[3]) || ext_kv_view(&a[2].t, &a[3].t, &kv) ||
        ext_tensor(args[1], 0, -1, &a[0]) || ext_tensor(args[2], 0, -1, &a[1]) ||
        (nargs == 9 && (g_lib.reshape_and_cache_scaled == NULL ||
                        ext_fp8_cache(args[6], args[7], args[8], &kv, NULL, NULL, &ks, &vs))))
        return ext_not_implemented(a, 5);
    attn_status st;
    if (nargs == 9)
        EXT_CALL(st, g_lib.reshape_and_cache_scaled((attn_ctx *)ctx, &a[0].t, &a[1].t, &kv, &a[4].t, ks, vs));
    else
        EXT_CALL(st, g_lib.reshape_and_cache((attn_ctx *)ctx, &a[0].t, &a[1].t, &kv, &a[4].t));
    ext_release_all(a, 5);
    if (st != ATTN_STATUS_OK)
        return ext_raise(st, "attn_reshape_and_cache");
    Py_RETURN_NONE;
}

/* merge_attn_states(ctx, out_a, lse_a, out_b, lse_b, out, lse_out, want_lse)
 * out_a/out_b [num_tokens, num_heads, head_size]; lse_a/lse_b float32 [num_heads, num_tokens]. out
 * allocated like out_a, lse_out like lse_a (float32) when None. Returns out or (out, lse_out). */
static PyObject *ext_merge_attn_states(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("merge_attn_states", 8);
    enum { OA, LA, OB, LB, OUT, LSE, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx;
    PyObject *out = NULL, *lse = NULL;
    attn_tensor *lse_t;
    const int want_lse = PyObject_IsTrue(args[7]);
    if (want_lse < 0)
        return NULL; /* its truth value raised (e.g. a NumPy array): that error */
    if (ext_handle(args[0], &ctx) || ext_tensor(args[1], 0, -1, &a[OA]) || ext_tensor(args[2], 0, -1, &a[LA]) ||
        ext_tensor(args[3], 0, -1, &a[OB]) || ext_tensor(args[4], 0, -1, &a[LB]))
        return ext_not_implemented(a, N);
    const attn_tensor *oa = &a[OA].t, *la = &a[LA].t;
    int r = ext_outputs(args[1], args[5], oa->ndim, oa->shape, oa->dtype, args[6], want_lse,
                        la->ndim > 0 ? la->ndim : -1, la->shape, &a[OUT], &a[LSE], &out, &lse, &lse_t);
    if (r == 0 && want_lse && lse_t == NULL)
        r = EXT_FALLBACK; /* 0-d lse_a: the general path */
    if (r != 0) {
        Py_XDECREF(out);
        Py_XDECREF(lse);
        if (r < 0) {
            ext_release_all(a, N);
            return NULL;
        }
        return ext_not_implemented(a, N);
    }
    attn_status st;
    EXT_CALL(st, g_lib.merge_attn_states((attn_ctx *)ctx, oa, la, &a[OB].t, &a[LB].t, &a[OUT].t, lse_t));
    ext_release_all(a, N);
    if (st != ATTN_STATUS_OK) {
        Py_DECREF(out);
        Py_XDECREF(lse);
        return ext_raise(st, "attn_merge_attn_states");
    }
    return ext_result(out, lse, want_lse);
}

/* forward(ctx, layout, q, k, v, softmax_scale, causal, flash_causal, window_size, softcap, alibi_slopes,
 *         sinks, out, lse, want_lse)
 * Dense attention (attn_forward), no masks. BSND: q [batch, seq_q, num_heads, head_size], k/v [batch,
 * seq_k, num_kv_heads, head_size(_v)]; BNSD swaps dims 1 and 2. out [.., head_size_v] in q's dtype; lse
 * float32 [batch, num_heads, seq_q]. */
static PyObject *ext_forward(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("forward", 15);
    enum { Q, K, V, OUT, LSE, AL, SI, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx;
    long long layout;
    attn_params p;
    PyObject *out = NULL, *lse = NULL;
    attn_tensor *lse_t;
    const int want_lse = PyObject_IsTrue(args[14]);
    if (want_lse < 0)
        return NULL; /* its truth value raised (e.g. a NumPy array): that error */
    const int flash = args[7] == Py_True;
    if (ext_handle(args[0], &ctx) || ext_int(args[1], 0, 1, &layout) || ext_tensor(args[2], 0, -1, &a[Q]) ||
        ext_tensor(args[3], 0, -1, &a[K]) || ext_tensor(args[4], 0, -1, &a[V]))
        return ext_not_implemented(a, N);
    const attn_tensor *q = &a[Q].t, *v = &a[V].t;
    const int nd = layout == ATTN_LAYOUT_BSND ? 2 : 1, sd = 3 - nd;
    const int64_t num_heads = q->ndim == 4 ? q->shape[nd] : -1;
    ext_arg keep[2];
    memset(keep, 0, sizeof keep);
    if (ext_params(args[5], args[6], flash, args[8], args[9], args[10], args[11], num_heads, keep, &p)) {
        ext_release_all(keep, 2);
        return ext_not_implemented(a, N);
    }
    a[AL] = keep[0];
    a[SI] = keep[1];
    int64_t out_shape[ATTN_MAX_DIMS];
    memcpy(out_shape, q->shape, sizeof out_shape);
    if (q->ndim == 4) {
        if (v->ndim < 1)
            return ext_not_implemented(a, N);
        out_shape[3] = v->shape[v->ndim - 1];
    }
    const int64_t lse_shape[3] = {q->shape[0], q->ndim == 4 ? q->shape[nd] : 0, q->ndim == 4 ? q->shape[sd] : 0};
    int r = ext_outputs(args[2], args[12], q->ndim, out_shape, q->dtype, args[13], want_lse, q->ndim == 4 ? 3 : 0,
                        lse_shape, &a[OUT], &a[LSE], &out, &lse, &lse_t);
    if (r != 0) {
        Py_XDECREF(out);
        Py_XDECREF(lse);
        if (r < 0) {
            ext_release_all(a, N);
            return NULL;
        }
        return ext_not_implemented(a, N);
    }
    attn_status st;
    EXT_CALL(st, g_lib.forward((attn_ctx *)ctx, (attn_layout)layout, q, &a[K].t, v, &p, &a[OUT].t, lse_t));
    ext_release_all(a, N);
    if (st != ATTN_STATUS_OK) {
        Py_DECREF(out);
        Py_XDECREF(lse);
        return ext_raise(st, "attn_forward");
    }
    return ext_result(out, lse, want_lse);
}

/* Element size of the float/int dtypes the fast paths write (tails, transposes). */
static size_t ext_item(attn_dtype d) {
    switch (d) {
    case ATTN_DTYPE_F32:
    case ATTN_DTYPE_I32:
        return 4;
    case ATTN_DTYPE_F16:
    case ATTN_DTYPE_BF16:
        return 2;
    case ATTN_DTYPE_I64:
        return 8;
    default:
        return 1;
    }
}

/* Rows [end, shape[0]) of a freshly allocated out (zero bits = +0.0 in f32/f16/bf16) and of lse [H, T]
 * (-inf), as flash._zero_tail does. */
static void ext_zero_tail(const attn_tensor *out, const attn_tensor *lse, int64_t end) {
    if (end < 0)
        end = 0;
    const size_t item = ext_item(out->dtype);
    for (int64_t t = end; t < out->shape[0]; t++) {
        for (int64_t h = 0; h < out->shape[1]; h++) {
            char *row = (char *)out->data + (size_t)(t * out->strides[0] + h * out->strides[1]) * item;
            memset(row, 0, (size_t)out->shape[2] * item);
        }
    }
    if (lse == NULL)
        return;
    for (int64_t h = 0; h < lse->shape[0]; h++) {
        for (int64_t t = end; t < lse->shape[1]; t++) {
            ((float *)lse->data)[h * lse->strides[0] + t * lse->strides[1]] = -INFINITY;
        }
    }
}

/* varlen(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, flash_causal, window_size,
 *        softcap, alibi_slopes, sinks, out, want_lse, zero_tail)
 * Packed attention (attn_forward_varlen): q [total_q, num_heads, head_size], k/v [total_k, num_kv_heads,
 * head_size(_v)], cu_seqlens int32 [batch + 1]. out [total_q, num_heads, head_size_v] (allocated if None;
 * with zero_tail, rows past cu_seqlens_q[-1] of an allocated out are 0 and of the lse -inf); lse float32
 * [num_heads, total_q]. */
static PyObject *ext_varlen(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("varlen", 16);
    enum { Q, K, V, CQ, CK, OUT, LSE, AL, SI, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx;
    attn_params p;
    PyObject *out = NULL, *lse = NULL;
    attn_tensor *lse_t;
    const int want_lse = PyObject_IsTrue(args[14]);
    if (want_lse < 0)
        return NULL; /* its truth value raised (e.g. a NumPy array): that error */
    const int flash = args[8] == Py_True, zero_tail = args[15] == Py_True && args[13] == Py_None;
    if (ext_handle(args[0], &ctx) || ext_tensor(args[1], 0, -1, &a[Q]) || ext_tensor(args[2], 0, -1, &a[K]) ||
        ext_tensor(args[3], 0, -1, &a[V]) || ext_tensor(args[4], 0, ATTN_DTYPE_I32, &a[CQ]) ||
        ext_tensor(args[5], 0, ATTN_DTYPE_I32, &a[CK]))
        return ext_not_implemented(a, N);
    const attn_tensor *q = &a[Q].t, *v = &a[V].t, *cq = &a[CQ].t;
    if (zero_tail && (cq->ndim != 1 || cq->shape[0] < 1))
        return ext_not_implemented(a, N);
    const int64_t num_heads = q->ndim == 3 ? q->shape[1] : -1;
    ext_arg keep[2];
    memset(keep, 0, sizeof keep);
    if (ext_params(args[6], args[7], flash, args[9], args[10], args[11], args[12], num_heads, keep, &p)) {
        ext_release_all(keep, 2);
        return ext_not_implemented(a, N);
    }
    a[AL] = keep[0];
    a[SI] = keep[1];
    int64_t out_shape[ATTN_MAX_DIMS];
    memcpy(out_shape, q->shape, sizeof out_shape);
    if (q->ndim == 3) {
        if (v->ndim < 1)
            return ext_not_implemented(a, N);
        out_shape[2] = v->shape[v->ndim - 1];
    }
    const int64_t lse_shape[2] = {q->ndim == 3 ? q->shape[1] : 0, q->shape[0]};
    int r = ext_outputs(args[1], args[13], q->ndim, out_shape, q->dtype, Py_None, want_lse, q->ndim == 3 ? 2 : 0,
                        lse_shape, &a[OUT], &a[LSE], &out, &lse, &lse_t);
    if (r != 0) {
        Py_XDECREF(out);
        Py_XDECREF(lse);
        if (r < 0) {
            ext_release_all(a, N);
            return NULL;
        }
        return ext_not_implemented(a, N);
    }
    attn_status st;
    EXT_CALL(st, g_lib.forward_varlen((attn_ctx *)ctx, q, &a[K].t, v, cq, &a[CK].t, &p, &a[OUT].t, lse_t));
    if (st == ATTN_STATUS_OK && zero_tail && a[OUT].t.ndim == 3) {
        const int64_t end = ((const int32_t *)cq->data)[(cq->shape[0] - 1) * cq->strides[0]];
        ext_zero_tail(&a[OUT].t, lse_t, end);
    }
    ext_release_all(a, N);
    if (st != ATTN_STATUS_OK) {
        Py_DECREF(out);
        Py_XDECREF(lse);
        return ext_raise(st, "attn_forward_varlen");
    }
    return ext_result(out, lse, want_lse);
}

/* Scratch memory of one call: a stack buffer for small batches, PyMem for larger ones. */
typedef struct ext_scratch {
    _Alignas(16) unsigned char stack[4096];
    void *heap;
    size_t used, cap;
    unsigned char *base;
} ext_scratch;

/* `bytes` (16-aligned) from the scratch; NULL with MemoryError set if it cannot grow. Call ext_scratch_size
 * first with the total so the buffer is chosen once. */
static int ext_scratch_init(ext_scratch *s, size_t total) {
    s->heap = NULL;
    s->used = 0;
    s->cap = total;
    if (total <= sizeof s->stack) {
        s->base = s->stack;
        return 0;
    }
    s->heap = PyMem_Malloc(total);
    if (s->heap == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    s->base = (unsigned char *)s->heap;
    return 0;
}
static void *ext_scratch_take(ext_scratch *s, size_t bytes) {
    void *p = s->base + s->used;
    s->used += (bytes + 15) & ~(size_t)15;
    return p;
}
static void ext_scratch_free(ext_scratch *s) {
    PyMem_Free(s->heap);
    s->heap = NULL;
}

/* Row stride of [d0, d1, ...] merged into [d0*d1, ...] without a copy (NumPy reshape rules), or -1. */
static int64_t ext_merge01(const attn_tensor *t) {
    if (t->shape[1] == 1)
        return t->strides[0];
    if (t->shape[0] == 1 || t->strides[0] == t->shape[1] * t->strides[1])
        return t->strides[1];
    return -1;
}

/* `t` viewed as 3-D [d0*d1, d2, d3] (4-D in), 0 if possible without a copy. */
static int ext_view3(const attn_tensor *t, attn_tensor *o) {
    const int64_t s = ext_merge01(t);
    if (t->ndim != 4 || s < 0)
        return EXT_FALLBACK;
    *o = *t;
    o->ndim = 3;
    o->shape[0] = t->shape[0] * t->shape[1];
    o->strides[0] = s;
    o->shape[1] = t->shape[2];
    o->strides[1] = t->strides[2];
    o->shape[2] = t->shape[3];
    o->strides[2] = t->strides[3];
    return 0;
}

/* Element [i] of a 1-D int32 view / [r][c] of a 2-D one. */
#define EXT_I32_1(t, i)    (((const int32_t *)(t)->data)[(i) * (t)->strides[0]])
#define EXT_I32_2(t, r, c) (((const int32_t *)(t)->data)[(r) * (t)->strides[0] + (c) * (t)->strides[1]])

/* kvcache(ctx, q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, softmax_scale,
 *         causal, window_size, softcap, alibi_slopes, sinks, out, want_lse)
 * flash_attn_with_kvcache for caches that are the halves of one tensor:
 *   q [batch, seqlen_q, nheads, headdim]; k_cache/v_cache [batch_cache, seqlen_cache, nheads_k, headdim]
 *   or paged [num_blocks, block_size, nheads_k, headdim] with block_table int32 [batch, max_blocks];
 *   k/v [batch, seqlen_new, nheads_k, headdim] appended at cache_seqlens[b] (int or int32 [batch]);
 *   cache_batch_idx int32 [batch] (non-paged). Every check of python/attn/flash.flash_attn_with_kvcache
 *   runs first; any failure (or separate caches) is NotImplemented, so the Python path raises its error
 *   before anything is written. Then one attn_reshape_and_cache and one attn_paged_attention.
 * Returns out [batch, seqlen_q, nheads, headdim_v] or (out, lse float32 [batch, nheads, seqlen_q]). */
static PyObject *ext_kvcache(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("kvcache", 17);
    enum { Q, KC, VC, KN, VN, CS, BI, BT, OUT, AL, SI, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx;
    attn_params p;
    ext_scratch sc;
    sc.heap = NULL;
    PyObject *out = NULL, *lse = NULL;
    const int want_lse = PyObject_IsTrue(args[16]);
    if (want_lse < 0)
        return NULL; /* its truth value raised (e.g. a NumPy array): that error */
    PyObject *o_k = args[4], *o_v = args[5], *o_cs = args[6], *o_bi = args[7], *o_bt = args[8];
    if (ext_handle(args[0], &ctx) || ext_tensor(args[1], 0, -1, &a[Q]) || ext_tensor(args[2], 1, -1, &a[KC]) ||
        ext_tensor(args[3], 1, -1, &a[VC]))
        goto fallback;
    const attn_tensor *q = &a[Q].t, *kc = &a[KC].t, *vc = &a[VC].t;
    if (q->ndim != 4 || kc->ndim != 4 || vc->ndim != 4 || kc->dtype != vc->dtype)
        goto fallback;
    for (int i = 0; i < 3; i++) {
        if (kc->shape[i] != vc->shape[i])
            goto fallback;
    }
    const int64_t batch = q->shape[0], seqlen_q = q->shape[1], nheads = q->shape[2];
    const int64_t block_size = kc->shape[1], num_blocks = kc->shape[0];
    if (block_size <= 0)
        goto fallback;
    const attn_tensor *bt_in = NULL, *bi = NULL;
    int64_t capacity;
    if (o_bt != Py_None) {
        if (o_bi != Py_None || ext_tensor(o_bt, 0, ATTN_DTYPE_I32, &a[BT]))
            goto fallback;
        bt_in = &a[BT].t;
        if (bt_in->ndim != 2 || bt_in->shape[0] != batch)
            goto fallback;
        capacity = bt_in->shape[1] * block_size;
    } else {
        if (o_bi == Py_None) {
            if (num_blocks < batch)
                goto fallback;
        } else {
            if (ext_tensor(o_bi, 0, ATTN_DTYPE_I32, &a[BI]))
                goto fallback;
            bi = &a[BI].t;
            if (bi->ndim != 1 || bi->shape[0] != batch)
                goto fallback;
            for (int64_t b = 0; b < batch; b++) {
                const int32_t r = EXT_I32_1(bi, b);
                if (r < 0 || r >= num_blocks)
                    goto fallback;
            }
        }
        capacity = block_size;
    }
    long long cs_scalar = -1;
    const attn_tensor *cs = NULL;
    if (o_cs == Py_None) {
        cs_scalar = capacity;
    } else if (PyLong_CheckExact(o_cs)) {
        if (ext_int(o_cs, 0, INT32_MAX, &cs_scalar))
            goto fallback;
    } else {
        if (ext_tensor(o_cs, 0, ATTN_DTYPE_I32, &a[CS]))
            goto fallback;
        cs = &a[CS].t;
        if (cs->ndim != 1 || cs->shape[0] != batch)
            goto fallback;
    }
    int64_t seqlen_new = 0;
    if (o_k != Py_None || o_v != Py_None) {
        if (o_k == Py_None || o_v == Py_None || ext_tensor(o_k, 0, -1, &a[KN]) || ext_tensor(o_v, 0, -1, &a[VN]))
            goto fallback;
        const attn_tensor *kn = &a[KN].t, *vn = &a[VN].t;
        if (kn->ndim != 4 || vn->ndim != 4 || kn->dtype != vn->dtype)
            goto fallback;
        seqlen_new = kn->shape[1];
        const int64_t want_k[4] = {batch, seqlen_new, kc->shape[2], kc->shape[3]};
        const int64_t want_v[4] = {batch, seqlen_new, vc->shape[2], vc->shape[3]};
        for (int i = 0; i < 4; i++) {
            if (kn->shape[i] != want_k[i] || vn->shape[i] != want_v[i])
                goto fallback;
        }
    }
    /* per-sequence lengths, the block table of the non-paged layout, slots and query_start_loc */
    const size_t nslots = (size_t)(batch * seqlen_new);
    const int64_t lse_rows = want_lse ? nheads * batch * seqlen_q : 0;
    if (batch * seqlen_q > INT32_MAX || capacity > (int64_t)INT32_MAX + 1 ||
        ext_scratch_init(&sc, 16 * 5 + (size_t)batch * 4 * 3 + 4 + nslots * 8 + (size_t)lse_rows * 4) != 0) {
        if (PyErr_Occurred())
            goto error;
        goto fallback;
    }
    int32_t *seq_lens = ext_scratch_take(&sc, (size_t)batch * 4);
    int32_t *rows = ext_scratch_take(&sc, (size_t)batch * 4);
    int32_t *qsl = ext_scratch_take(&sc, (size_t)(batch + 1) * 4);
    int64_t *slots = ext_scratch_take(&sc, nslots * 8);
    float *lse3 = ext_scratch_take(&sc, (size_t)lse_rows * 4);
    for (int64_t b = 0; b < batch; b++) {
        const int64_t have = cs ? EXT_I32_1(cs, b) : cs_scalar;
        if (have < 0 || have + seqlen_new > capacity || have + seqlen_new > INT32_MAX)
            goto fallback;
        seq_lens[b] = (int32_t)(have + seqlen_new);
        rows[b] = bi ? EXT_I32_1(bi, b) : (int32_t)b;
        qsl[b] = (int32_t)(b * seqlen_q);
    }
    qsl[batch] = (int32_t)(batch * seqlen_q);
    attn_tensor bt;
    if (bt_in != NULL) {
        bt = *bt_in;
        for (int64_t b = 0; b < batch; b++) {
            const int64_t nblk = (seq_lens[b] + block_size - 1) / block_size;
            for (int64_t j = 0; j < nblk; j++) {
                const int32_t id = EXT_I32_2(bt_in, b, j);
                if (id < 0 || id >= num_blocks)
                    goto fallback;
            }
        }
    } else {
        const int64_t shp[2] = {batch, 1};
        bt.data = rows;
        bt.dtype = ATTN_DTYPE_I32;
        bt.ndim = 2;
        memcpy(bt.shape, shp, sizeof shp);
        bt.strides[0] = 1;
        bt.strides[1] = 1;
    }
    /* outputs, options and views: still nothing written */
    const int64_t out_shape[4] = {batch, seqlen_q, nheads, vc->shape[3]};
    attn_tensor q3, o3, k3, v3, kv;
    if (args[15] != Py_None) {
        if (ext_tensor(args[15], 1, -1, &a[OUT]))
            goto fallback;
        for (int i = 0; i < 4; i++) {
            if (a[OUT].t.ndim != 4 || a[OUT].t.shape[i] != out_shape[i])
                goto fallback;
        }
    }
    if ((args[15] == Py_None && g_py.np_dtype[q->dtype < 16 ? q->dtype : 0] == NULL) ||
        (want_lse && g_py.np_dtype[ATTN_DTYPE_F32] == NULL) || q->dtype >= 16)
        goto fallback;
    ext_arg keep[2];
    memset(keep, 0, sizeof keep);
    if (ext_params(args[9], args[10], 1, args[11], args[12], args[13], args[14], nheads, keep, &p)) {
        ext_release_all(keep, 2);
        goto fallback;
    }
    a[AL] = keep[0];
    a[SI] = keep[1];
    if (ext_kv_view(kc, vc, &kv) || ext_view3(q, &q3))
        goto fallback;
    if (args[15] != Py_None) {
        if (ext_view3(&a[OUT].t, &o3))
            goto fallback;
    }
    if (seqlen_new && (ext_view3(&a[KN].t, &k3) || ext_view3(&a[VN].t, &v3)))
        goto fallback;
    /* everything checked: write the new keys, then attend */
    attn_status st = ATTN_STATUS_OK;
    if (seqlen_new) {
        for (int64_t b = 0; b < batch; b++) {
            const int64_t have = seq_lens[b] - seqlen_new;
            for (int64_t s = 0; s < seqlen_new; s++) {
                const int64_t pos = have + s;
                const int64_t blk = bt_in ? EXT_I32_2(bt_in, b, pos / block_size) : rows[b];
                slots[b * seqlen_new + s] = blk * block_size + pos % block_size;
            }
        }
        attn_tensor sm;
        const int64_t n = (int64_t)nslots;
        sm.data = slots;
        sm.dtype = ATTN_DTYPE_I64;
        sm.ndim = 1;
        sm.shape[0] = n;
        sm.strides[0] = 1;
        EXT_CALL(st, g_lib.reshape_and_cache((attn_ctx *)ctx, &k3, &v3, &kv, &sm));
        if (st != ATTN_STATUS_OK) {
            ext_raise(st, "attn_reshape_and_cache");
            goto error;
        }
    }
    if (args[15] == Py_None) {
        out = ext_alloc(args[1], 4, out_shape, q->dtype, &a[OUT]);
        if (out == NULL)
            goto error;
        if (ext_view3(&a[OUT].t, &o3)) {
            PyErr_SetString(PyExc_RuntimeError, "attn._ext: allocated output is not contiguous");
            goto error;
        }
    } else {
        out = args[15];
        Py_INCREF(out);
    }
    attn_tensor tqsl, tsl, tlse;
    tqsl.data = qsl;
    tqsl.dtype = ATTN_DTYPE_I32;
    tqsl.ndim = 1;
    tqsl.shape[0] = batch + 1;
    tqsl.strides[0] = 1;
    tsl = tqsl;
    tsl.data = seq_lens;
    tsl.shape[0] = batch;
    tlse.data = lse3;
    tlse.dtype = ATTN_DTYPE_F32;
    tlse.ndim = 2;
    tlse.shape[0] = nheads;
    tlse.shape[1] = batch * seqlen_q;
    tlse.strides[0] = batch * seqlen_q;
    tlse.strides[1] = 1;
    EXT_CALL(st, g_lib.paged_attention((attn_ctx *)ctx, &q3, &kv, &tqsl, &tsl, &bt, &p, &o3, want_lse ? &tlse : NULL));
    if (st != ATTN_STATUS_OK) {
        ext_raise(st, "attn_paged_attention");
        goto error;
    }
    if (want_lse) {
        const int64_t lshape[3] = {batch, nheads, seqlen_q};
        ext_arg al;
        memset(&al, 0, sizeof al);
        lse = ext_alloc(args[1], 3, lshape, ATTN_DTYPE_F32, &al);
        if (lse == NULL)
            goto error;
        const attn_tensor *l = &al.t;
        for (int64_t b = 0; b < batch; b++)
            for (int64_t h = 0; h < nheads; h++)
                for (int64_t s = 0; s < seqlen_q; s++)
                    ((float *)l->data)[b * l->strides[0] + h * l->strides[1] + s * l->strides[2]] =
                        lse3[h * batch * seqlen_q + b * seqlen_q + s];
        ext_arg_release(&al);
    }
    ext_scratch_free(&sc);
    ext_release_all(a, N);
    return ext_result(out, lse, want_lse);
fallback:
    ext_scratch_free(&sc);
    return ext_not_implemented(a, N);
error:
    ext_scratch_free(&sc);
    ext_release_all(a, N);
    Py_XDECREF(out);
    Py_XDECREF(lse);
    return NULL;
}

/* varlen_paged(ctx, q, k_cache, v_cache, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k, softmax_scale,
 *              causal, window_size, softcap, alibi_slopes, sinks, out, want_lse)
 * flash_attn_varlen_func(block_table=...) for caches that are the halves of one tensor: q [total_q, nheads,
 * headdim]; k_cache/v_cache [num_blocks, block_size, nheads_k, headdim]; cu_seqlens_q/k int32 [batch + 1];
 * block_table int32 [batch, max_blocks]; seqused_k int32 [batch] or None (then cu_seqlens_k differences).
 * The checks of python/attn/flash.flash_attn_varlen_func run first (any failure: NotImplemented), then one
 * attn_paged_attention. An allocated out has rows past cu_seqlens_q[-1] zeroed (lse -inf).
 * Returns out or (out, lse float32 [nheads, total_q]). */
static PyObject *ext_varlen_paged(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("varlen_paged", 16);
    enum { Q, KC, VC, CQ, CK, BT, SU, OUT, LSE, AL, SI, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx;
    attn_params p;
    ext_scratch sc;
    sc.heap = NULL;
    PyObject *out = NULL, *lse = NULL;
    attn_tensor *lse_t = NULL;
    const int want_lse = PyObject_IsTrue(args[15]);
    if (want_lse < 0)
        return NULL; /* its truth value raised (e.g. a NumPy array): that error */
    const int allocated = args[14] == Py_None;
    if (ext_handle(args[0], &ctx) || ext_tensor(args[4], 0, ATTN_DTYPE_I32, &a[CQ]) ||
        ext_tensor(args[1], 0, -1, &a[Q]) || ext_tensor(args[2], 0, -1, &a[KC]) || ext_tensor(args[3], 0, -1, &a[VC]))
        goto fallback;
    const attn_tensor *cq = &a[CQ].t, *q = &a[Q].t, *kc = &a[KC].t, *vc = &a[VC].t;
    if (cq->ndim != 1 || cq->shape[0] < 1 || q->ndim != 3 || kc->ndim != 4 || vc->ndim != 4 || kc->dtype != vc->dtype)
        goto fallback;
    for (int i = 0; i < 3; i++) {
        if (kc->shape[i] != vc->shape[i])
            goto fallback;
    }
    const int64_t batch = cq->shape[0] - 1, block_size = kc->shape[1];
    if (block_size <= 0 || ext_tensor(args[5], 0, ATTN_DTYPE_I32, &a[CK]) || a[CK].t.ndim != 1 ||
        a[CK].t.shape[0] != batch + 1 || ext_tensor(args[6], 0, ATTN_DTYPE_I32, &a[BT]) || a[BT].t.ndim != 2 ||
        a[BT].t.shape[0] != batch)
        goto fallback;
    const attn_tensor *ck = &a[CK].t, *bt = &a[BT].t;
    if (ext_scratch_init(&sc, (size_t)batch * 4 + 16) != 0)
        goto error;
    int32_t *lens = ext_scratch_take(&sc, (size_t)batch * 4);
    attn_tensor tsl;
    if (args[7] == Py_None) {
        for (int64_t b = 0; b < batch; b++) {
            const int64_t n = (int64_t)EXT_I32_1(ck, b + 1) - EXT_I32_1(ck, b);
            if (n < 0 || n > INT32_MAX)
                goto fallback;
            lens[b] = (int32_t)n;
        }
    } else {
        if (ext_tensor(args[7], 0, ATTN_DTYPE_I32, &a[SU]) || a[SU].t.ndim != 1 || a[SU].t.shape[0] != batch)
            goto fallback;
        for (int64_t b = 0; b < batch; b++) {
            lens[b] = EXT_I32_1(&a[SU].t, b);
            if (lens[b] < 0)
                goto fallback;
        }
    }
    tsl.data = lens;
    tsl.dtype = ATTN_DTYPE_I32;
    tsl.ndim = 1;
    tsl.shape[0] = batch;
    tsl.strides[0] = 1;
    /* the block table's width and ids are libattn's check (attn_paged_attention), raised with its message */
    const int64_t out_shape[3] = {q->shape[0], q->shape[1], vc->shape[3]};
    if (!allocated) {
        if (ext_tensor(args[14], 1, -1, &a[OUT]) || a[OUT].t.ndim != 3)
            goto fallback;
        for (int i = 0; i < 3; i++) {
            if (a[OUT].t.shape[i] != out_shape[i])
                goto fallback;
        }
    } else if (q->dtype >= 16 || g_py.np_dtype[q->dtype] == NULL) {
        goto fallback;
    }
    if (want_lse && g_py.np_dtype[ATTN_DTYPE_F32] == NULL)
        goto fallback;
    ext_arg keep[2];
    memset(keep, 0, sizeof keep);
    if (ext_params(args[8], args[9], 1, args[10], args[11], args[12], args[13], q->shape[1], keep, &p)) {
        ext_release_all(keep, 2);
        goto fallback;
    }
    a[AL] = keep[0];
    a[SI] = keep[1];
    attn_tensor kv;
    if (ext_kv_view(kc, vc, &kv))
        goto fallback;
    if (allocated) {
        out = ext_alloc(args[1], 3, out_shape, q->dtype, &a[OUT]);
        if (out == NULL)
            goto error;
    } else {
        out = args[14];
        Py_INCREF(out);
    }
    if (want_lse) {
        const int64_t lshape[2] = {q->shape[1], q->shape[0]};
        lse = ext_alloc(args[1], 2, lshape, ATTN_DTYPE_F32, &a[LSE]);
        if (lse == NULL)
            goto error;
        lse_t = &a[LSE].t;
    }
    attn_status st;
    EXT_CALL(st, g_lib.paged_attention((attn_ctx *)ctx, q, &kv, cq, &tsl, bt, &p, &a[OUT].t, lse_t));
    if (st != ATTN_STATUS_OK) {
        ext_raise(st, "attn_paged_attention");
        goto error;
    }
    if (allocated)
        ext_zero_tail(&a[OUT].t, lse_t, EXT_I32_1(cq, cq->shape[0] - 1));
    ext_scratch_free(&sc);
    ext_release_all(a, N);
    return ext_result(out, lse, want_lse);
fallback:
    ext_scratch_free(&sc);
    return ext_not_implemented(a, N);
error:
    ext_scratch_free(&sc);
    ext_release_all(a, N);
    Py_XDECREF(out);
    Py_XDECREF(lse);
    return NULL;
}

/* ================================================================================================
 * Module
 * ================================================================================================ */

/* _init(entries, ndarray, np_empty, alloc_like, make_error, np_dtypes, view_dtypes, special_dtypes)
 *   entries: {"attn_paged_attention": address, ...} of the library ctypes loaded;
 *   np_dtypes: {attn dtype: numpy dtype}; view_dtypes: {attn dtype: same-width uint dtype} for bf16/fp8;
 *   special_dtypes: {numpy dtype: attn dtype} of dtypes without a buffer format. */
static PyObject *ext_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("_init", 8);
    PyObject *entries = args[0];
    if (!PyDict_Check(entries) || !PyDict_Check(args[5]) || !PyDict_Check(args[6]) || !PyDict_Check(args[7])) {
        PyErr_SetString(PyExc_TypeError, "attn._ext._init: expected dicts");
        return NULL;
    }
    static const char *names[] = {"attn_paged_attention", "attn_forward_paged",  "attn_reshape_and_cache",
                                  "attn_forward",         "attn_forward_varlen", "attn_merge_attn_states",
                                  "attn_last_error",      "attn_clear_error",    "attn_params_init_sized",
                                  "attn_version_number"};
    void *fp[10];
    for (int i = 0; i < 10; i++) {
        PyObject *v = PyDict_GetItemString(entries, names[i]);
        fp[i] = v ? PyLong_AsVoidPtr(v) : NULL;
        if (fp[i] == NULL) {
            PyErr_Format(PyExc_ImportError, "attn._ext: libattn entry %s missing", names[i]);
            return NULL;
        }
    }
    /* Object pointers <-> function pointers: POSIX guarantees the round trip (dlsym). */
    memcpy(&g_lib.paged_attention, &fp[0], sizeof fp[0]);
    memcpy(&g_lib.forward_paged, &fp[1], sizeof fp[1]);
    memcpy(&g_lib.reshape_and_cache, &fp[2], sizeof fp[2]);
    memcpy(&g_lib.forward, &fp[3], sizeof fp[3]);
    memcpy(&g_lib.forward_varlen, &fp[4], sizeof fp[4]);
    memcpy(&g_lib.merge_attn_states, &fp[5], sizeof fp[5]);
    memcpy(&g_lib.last_error, &fp[6], sizeof fp[6]);
    memcpy(&g_lib.clear_error, &fp[7], sizeof fp[7]);
    ext_version_fn version;
    memcpy(&version, &fp[9], sizeof fp[9]);
    if (version() != ATTN_VERSION_NUMBER) { /* another build's attn.h: struct layouts may differ */
        PyErr_Format(PyExc_ImportError, "attn._ext was built for libattn %d, the loaded library is %u",
                     ATTN_VERSION_NUMBER, version());
        return NULL;
    }
    PyObject *scaled = PyDict_GetItemString(entries, "attn_reshape_and_cache_scaled");
    void *scaled_fp = scaled ? PyLong_AsVoidPtr(scaled) : NULL;
    PyErr_Clear();
    memcpy(&g_lib.reshape_and_cache_scaled, &scaled_fp, sizeof scaled_fp);
    ext_params_init_fn params_init;
    memcpy(&params_init, &fp[8], sizeof fp[8]);
    params_init(&g_lib.params_default, sizeof g_lib.params_default);

    PyObject **slots[4] = {&g_py.ndarray_type, &g_py.np_empty, &g_py.alloc_like, &g_py.make_error};
    for (int i = 0; i < 4; i++) {
        Py_INCREF(args[1 + i]);
        Py_XSETREF(*slots[i], args[1 + i]);
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(args[5], &pos, &key, &value)) {
        const long d = PyLong_AsLong(key);
        if (d == -1 && PyErr_Occurred())
            return NULL; /* (before any object is released with an exception set) */
        if (d >= 0 && d < 16) {
            Py_INCREF(value);
            Py_XSETREF(g_py.np_dtype[d], value);
        }
    }
    pos = 0;
    while (PyDict_Next(args[6], &pos, &key, &value)) {
        const long d = PyLong_AsLong(key);
        if (d == -1 && PyErr_Occurred())
            return NULL;
        if (d >= 0 && d < 16) {
            Py_INCREF(value);
            Py_XSETREF(g_py.view_dtype[d], value);
        }
    }
    pos = 0;
    while (PyDict_Next(args[7], &pos, &key, &value) && g_py.num_special < 16) {
        const long d = PyLong_AsLong(value);
        if (d == -1 && PyErr_Occurred())
            return NULL;
        Py_INCREF(key);
        g_py.special[g_py.num_special] = key;
        g_py.special_attn[g_py.num_special++] = (int)d;
    }
    g_lib.ready = 1;
    Py_RETURN_NONE;
}

static PyMethodDef ext_methods[] = {
    {"_init", (PyCFunction)(void (*)(void))ext_init, METH_FASTCALL, "Hands over libattn and NumPy objects."},
    {"paged_attention", (PyCFunction)(void (*)(void))ext_paged_attention, METH_FASTCALL,
     "attn_paged_attention fast path (NotImplemented: use the general path)."},
    {"forward_paged", (PyCFunction)(void (*)(void))ext_forward_paged, METH_FASTCALL, "attn_forward_paged fast path."},
    {"reshape_and_cache", (PyCFunction)(void (*)(void))ext_reshape_and_cache, METH_FASTCALL,
     "attn_reshape_and_cache fast path."},
    {"vllm_reshape_and_cache", (PyCFunction)(void (*)(void))ext_vllm_reshape_and_cache, METH_FASTCALL,
     "vllm_ops.reshape_and_cache fast path (caches that are halves of one tensor)."},
    {"merge_attn_states", (PyCFunction)(void (*)(void))ext_merge_attn_states, METH_FASTCALL,
     "attn_merge_attn_states fast path."},
    {"forward", (PyCFunction)(void (*)(void))ext_forward, METH_FASTCALL, "attn_forward fast path (no masks)."},
    {"varlen", (PyCFunction)(void (*)(void))ext_varlen, METH_FASTCALL, "attn_forward_varlen fast path."},
    {"kvcache", (PyCFunction)(void (*)(void))ext_kvcache, METH_FASTCALL, "flash_attn_with_kvcache fast path."},
    {"varlen_paged", (PyCFunction)(void (*)(void))ext_varlen_paged, METH_FASTCALL,
     "flash_attn_varlen_func(block_table=...) fast path."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef ext_module = {PyModuleDef_HEAD_INIT,
                                        "attn._ext",
                                        "Compiled fast paths of the attn Python package (see _ext.c).",
                                        -1,
                                        ext_methods,
                                        NULL,
                                        NULL,
                                        NULL,
                                        NULL};

PyMODINIT_FUNC PyInit__ext(void) {
    PyObject *m = PyModule_Create(&ext_module);
    if (m == NULL)
        return NULL;
    g_py.s_dlpack = PyUnicode_InternFromString("__dlpack__");
    g_py.s_dtype = PyUnicode_InternFromString("dtype");
    g_py.s_view = PyUnicode_InternFromString("view");
    g_py.s_requires_grad = PyUnicode_InternFromString("requires_grad");
    g_py.s_torch = PyUnicode_InternFromString("torch");
    if (!g_py.s_dlpack || !g_py.s_dtype || !g_py.s_view || !g_py.s_requires_grad || !g_py.s_torch) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
