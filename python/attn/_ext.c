/*
 * _ext.c — the CPython extension `attn._ext`, the attn package's only path to libattn (which it links).
 *
 * Every entry of attn.h / attn_experimental.h is a function `attn_*` described by a table (EXT_ENTRY): one
 * letter per argument and one converter per letter (ext_parse): NumPy arrays (buffer protocol; bf16/fp8
 * ml_dtypes arrays through a same-width integer view) and DLPack producers (torch tensors: torch's DLPack C
 * exchange table where it has one, else the `__dlpack__` capsule) become attn_tensor views, the GIL is released around
 * the call, and a failing status raises the AttnError subclass with attn_last_error()'s message (ext_raise;
 * python/attn/_capi.py builds the object). What C cannot view itself (lists, torch tensors that require grad) goes
 * through attn._arrays.as_view, which also names the argument in the error.
 *
 * The hot entries (paged attention with and without a plan, cache writes, dense / varlen attention, merge, and
 * the flash / vLLM conveniences flash_attn_with_kvcache, paged flash_attn_varlen_func and vLLM's
 * reshape_and_cache) also parse the options and allocate the outputs in C, for the few microseconds a decode
 * step allows. Each has one path for every input: what libattn takes is passed to it and libattn validates;
 * the extension checks only what it derives itself (lengths, slots, row tables, reshaped views).
 */
#define _GNU_SOURCE /* dladdr */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/attn_experimental.h"

/* attn_params_init_sized() output (struct_size set), copied per call; set by _init. */
static attn_params g_params_default;

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
    const struct ext_dl_exchange *torch_api; /* torch.Tensor.__dlpack_c_exchange_api__ (NULL: none) */
    PyObject *torch_grad, *torch_is_neg;     /* torch.Tensor.requires_grad (a getset) and .is_neg, or NULL */
    PyObject *s_dlpack, *s_dtype, *s_view, *s_requires_grad, *s_torch; /* interned names        */
} g_py;

#define EXT_NOVIEW 1 /* helper result: C cannot view the argument; attn._arrays converts it or names the error */

/* ================================================================================================
 * Tensor arguments
 * ================================================================================================ */

/* One converted argument: the view plus what keeps its memory alive until ext_arg_release(). */
typedef struct ext_arg {
    attn_tensor t;
    Py_buffer view;    /* held buffer (kind 1)                    */
    PyObject *capsule; /* unconsumed DLPack capsule (kind 2)      */
    PyObject *tmp;     /* bf16/fp8 integer view array (kind 1)    */
    PyObject *src;     /* the array attn._arrays made of the argument (ext_tensor_n) */
    struct ext_dl_versioned *managed; /* torch's exported tensor (kind 3) */
    int kind;                         /* 0 none, 1 buffer, 2 capsule, 3 managed  */
} ext_arg;

/* Releases what `a` holds (safe on a zeroed or already released argument). */
static void ext_dl_release(struct ext_dl_versioned *m);

static void ext_arg_release(ext_arg *a) {
    if (a->kind == 1)
        PyBuffer_Release(&a->view);
    if (a->kind == 3)
        ext_dl_release(a->managed);
    a->managed = NULL;
    Py_CLEAR(a->capsule);
    Py_CLEAR(a->tmp);
    Py_CLEAR(a->src);
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
 * dimension's unusable stride becomes 0 (1 for the last), an empty view's strides are its exact C-contiguous ones;
 * a negative or misaligned stride is EXT_NOVIEW.
 * So is a view whose sizes or addresses do not fit in int64 (a negative size, a product of sizes, or the
 * byte offset of its last element, also for empty views): every index computation here and in libattn then
 * stays in range, and attn._arrays reports the argument. */
static int ext_set_dims(ext_arg *a, int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides_bytes,
                        const int64_t *strides_elems, Py_ssize_t item) {
    if (ndim < 0 || ndim > ATTN_MAX_DIMS)
        return EXT_NOVIEW;
    a->t.ndim = ndim;
    int64_t acc = 1;
    for (int i = ndim - 1; i >= 0; i--) { /* default: C-contiguous */
        if (shape[i] < 0)
            return EXT_NOVIEW;
        a->t.strides[i] = acc;
        if (!ext_mul(acc, shape[i] > 1 ? (int64_t)shape[i] : 1, &acc))
            return EXT_NOVIEW;
    }
    int64_t end = 1; /* elements up to and including the last one */
    if (!ext_mul(acc, (int64_t)item, &acc))
        return EXT_NOVIEW;
    int empty = 0;
    for (int i = 0; i < ndim; i++)
        empty |= shape[i] == 0;
    if (empty) { /* no element is read: exact C-contiguous strides (0 above the empty dimension), whatever the
                  * producer gave (NumPy's view of an empty torch tensor has 0s, torch 16s), so views agree */
        int64_t s = 1;
        for (int i = ndim - 1; i >= 0; s *= shape[i--]) /* (<= the product checked above) */
            a->t.strides[i] = s;
        strides_bytes = NULL;
        strides_elems = NULL;
    }
    for (int i = 0; i < ndim; i++) {
        a->t.shape[i] = shape[i];
        int64_t s;
        if (strides_bytes != NULL) {
            s = strides_bytes[i];
            if (shape[i] <= 1 && (i == ndim - 1 || s < 0 || s % item))
                s = i == ndim - 1 ? item : 0;
            if (s < 0 || s % item)
                return EXT_NOVIEW;
            a->t.strides[i] = s / item;
        } else if (strides_elems != NULL) {
            s = strides_elems[i];
            if (shape[i] <= 1 && (i == ndim - 1 || s < 0))
                s = i == ndim - 1 ? 1 : 0;
            if (s < 0)
                return EXT_NOVIEW;
            a->t.strides[i] = s;
        }
        int64_t span;
        if (shape[i] > 0) {
            if (!ext_mul(shape[i] - 1, a->t.strides[i], &span) || span > INT64_MAX - end)
                return EXT_NOVIEW;
            end += span;
        }
    }
    return ext_mul(end, (int64_t)item, &end) ? 0 : EXT_NOVIEW;
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
            return EXT_NOVIEW;
        }
    } else {
        PyErr_Clear();
        PyObject *dt = PyObject_GetAttr(obj, g_py.s_dtype);
        if (dt == NULL) {
            PyErr_Clear();
            return EXT_NOVIEW;
        }
        for (int i = 0; i < g_py.num_special; i++) {
            if (g_py.special[i] == dt)
                dtype = g_py.special_attn[i];
        }
        Py_DECREF(dt);
        if (dtype < 0 || dtype >= 16 || g_py.view_dtype[dtype] == NULL)
            return EXT_NOVIEW;
        src = PyObject_CallMethodOneArg(obj, g_py.s_view, g_py.view_dtype[dtype]);
        if (src == NULL) {
            PyErr_Clear();
            return EXT_NOVIEW;
        }
        if (PyObject_GetBuffer(src, &a->view, flags) != 0) {
            PyErr_Clear();
            Py_DECREF(src);
            return EXT_NOVIEW;
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
/* DLPack 1.x: the versioned managed tensor and the C exchange table a producer publishes on its tensor type as
 * `__dlpack_c_exchange_api__` (a "dlpack_exchange_api" capsule; torch >= 2.10). Its functions turn a tensor into a
 * managed tensor, or allocate one, without a Python call or a capsule: ~0.1 µs against ~0.6 µs for
 * torch._C._to_dlpack. Only the entries used here are named; the layout is the specification's. */
typedef struct ext_dl_version {
    uint32_t major, minor;
} ext_dl_version;
typedef struct ext_dl_versioned {
    ext_dl_version version;
    void *manager_ctx;
    void (*deleter)(struct ext_dl_versioned *);
    uint64_t flags; /* bit 0: read only */
    ext_dl_tensor dl_tensor;
} ext_dl_versioned;
typedef struct ext_dl_exchange {
    ext_dl_version version;
    void *prev_api;
    int (*allocate)(ext_dl_tensor *prototype, ext_dl_versioned **out, void *error_ctx,
                    void (*set_error)(void *error_ctx, const char *kind, const char *message));
    int (*from_py)(void *py_object, ext_dl_versioned **out);
    int (*to_py)(ext_dl_versioned *tensor, void **out_py_object);
} ext_dl_exchange;

static void ext_dl_release(ext_dl_versioned *m) {
    if (m != NULL && m->deleter != NULL)
        m->deleter(m);
}
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
 * requires_grad, read-only NumPy) or a non-CPU device is EXT_NOVIEW: attn._arrays warns / raises. */
static int ext_from_capsule(PyObject *cap, ext_arg *a);
static int ext_describe(const ext_dl_tensor *t, ext_arg *a);

static int ext_from_dlpack(PyObject *obj, ext_arg *a) {
    PyObject *cap = PyObject_CallMethodNoArgs(obj, g_py.s_dlpack);
    if (cap == NULL) {
        PyErr_Clear();
        return EXT_NOVIEW;
    }
    return ext_from_capsule(cap, a);
}

/* torch.Tensor -> view through the managed tensor of torch's exchange table (~0.1 µs), or, in a torch without
 * one, torch._C._to_dlpack, the C function Tensor.__dlpack__ ends in (that Python method alone costs ~2 µs).
 * The checks __dlpack__ makes first are kept: requires_grad is EXT_NOVIEW (attn._arrays warns once and reads a
 * detached view); a conjugate bit needs a complex dtype and a non-strided layout has no data pointer, both
 * refused below. A float tensor with the negative bit (x.conj().imag of a complex x) is EXT_NOVIEW too: DLPack
 * exports the stored values, not their negation, and attn._arrays reads a resolved copy or refuses to write. */
static int ext_from_torch(PyObject *obj, int writable, ext_arg *a) {
    /* (torch.Tensor's own descriptors, looked up once: an attribute lookup per argument costs more than the view) */
    PyObject *rg = g_py.torch_grad ? Py_TYPE(g_py.torch_grad)->tp_descr_get(g_py.torch_grad, obj, NULL)
                                   : PyObject_GetAttr(obj, g_py.s_requires_grad);
    const int needs_grad = rg != Py_False;
    Py_XDECREF(rg);
    PyErr_Clear();
    if (needs_grad)
        return EXT_NOVIEW;
    int r;
    if (g_py.torch_api != NULL) { /* the managed tensor straight from torch's C function */
        ext_dl_versioned *m = NULL;
        if (g_py.torch_api->from_py(obj, &m) != 0 || m == NULL) {
            PyErr_Clear();
            return EXT_NOVIEW;
        }
        a->managed = m;
        a->kind = 3;
        r = writable && (m->flags & 1) ? EXT_NOVIEW : ext_describe(&m->dl_tensor, a); /* (1: read only) */
    } else {
        PyObject *cap = PyObject_CallOneArg(g_py.torch_to_dlpack, obj);
        if (cap == NULL) {
            PyErr_Clear();
            return EXT_NOVIEW;
        }
        r = ext_from_capsule(cap, a);
    }
    /* the negative bit of a float tensor (~70 ns to ask: index arrays get it only from torch._neg_view) */
    const attn_dtype d = a->t.dtype;
    if (r == 0 && (d == ATTN_DTYPE_F32 || d == ATTN_DTYPE_F16 || d == ATTN_DTYPE_BF16)) {
        PyObject *neg = g_py.torch_is_neg ? PyObject_CallOneArg(g_py.torch_is_neg, obj) : NULL;
        r = neg == Py_False ? 0 : EXT_NOVIEW; /* (a torch without is_neg: attn._arrays decides) */
        Py_XDECREF(neg);
        PyErr_Clear();
    }
    return r;
}

/* Describes the DLPack tensor `t` in `a` (its memory is kept alive by the caller of this). */
static int ext_describe(const ext_dl_tensor *t, ext_arg *a) {
    const int dtype = ext_dl_attn_dtype(t->dtype);
    if (dtype < 0 || (t->device.device_type != EXT_DL_CPU && t->device.device_type != EXT_DL_CUDA_HOST) ||
        t->ndim < 0 || t->ndim > ATTN_MAX_DIMS || (t->ndim > 0 && t->shape == NULL))
        return EXT_NOVIEW;
    Py_ssize_t shape[ATTN_MAX_DIMS];
    int empty = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || t->shape[i] > PY_SSIZE_T_MAX)
            return EXT_NOVIEW;
        shape[i] = (Py_ssize_t)t->shape[i];
        empty |= shape[i] == 0;
    }
    a->t.dtype = (attn_dtype)dtype;
    const int r = ext_set_dims(a, t->ndim, shape, NULL, t->strides, 1);
    if (r != 0)
        return r;
    /* data NULL: only an empty view has no memory (no address is formed from it); one with elements is a
     * EXT_NOVIEW, and python/attn/_arrays.py names the argument */
    if (t->data == NULL) {
        if (!empty)
            return EXT_NOVIEW;
        a->t.data = NULL;
    } else {
        a->t.data = (void *)((uintptr_t)t->data + (uintptr_t)t->byte_offset);
    }
    return 0;
}

/* Takes over the reference `cap` ("dltensor" capsule, unconsumed) and describes its tensor in `a`. */
static int ext_from_capsule(PyObject *cap, ext_arg *a) {
    ext_dl_managed *m = (ext_dl_managed *)PyCapsule_GetPointer(cap, "dltensor");
    if (m == NULL) {
        PyErr_Clear();
        Py_DECREF(cap);
        return EXT_NOVIEW;
    }
    a->capsule = cap;
    a->kind = 2;
    return ext_describe(&m->dl_tensor, a);
}

/* Caches torch.Tensor, torch._C._to_dlpack and torch's exchange table once torch has been imported (by the
 * caller: never here). */
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
        /* the exchange table of DLPack major version 1 with its conversion entries, if this torch has one */
        PyObject *api = PyObject_GetAttrString(tensor, "__dlpack_c_exchange_api__");
        const ext_dl_exchange *x = api ? PyCapsule_GetPointer(api, "dlpack_exchange_api") : NULL;
        if (x != NULL && x->version.major == 1 && x->allocate && x->from_py && x->to_py)
            g_py.torch_api = x; /* (static in torch for the process's life) */
        Py_XDECREF(api);
        PyObject *grad = PyObject_GetAttr(tensor, g_py.s_requires_grad);
        if (grad != NULL && Py_TYPE(grad)->tp_descr_get != NULL)
            g_py.torch_grad = Py_NewRef(grad);
        Py_XDECREF(grad);
        g_py.torch_is_neg = PyObject_GetAttrString(tensor, "is_neg");
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

/* Any array argument -> view. `want` >= 0 requires that dtype (index arrays); float arguments accept any
 * attn dtype (libattn checks). Only numpy.ndarray (and subclasses) and objects with __dlpack__ are taken;
 * everything else (lists, scalars, memoryviews) is EXT_NOVIEW, as np.asarray may copy or reinterpret. */
static int ext_tensor(PyObject *obj, int writable, int want, ext_arg *a) {
    int r;
    if (PyObject_TypeCheck(obj, (PyTypeObject *)g_py.ndarray_type)) {
        r = ext_from_ndarray(obj, writable, a);
    } else if (obj == Py_None) {
        r = EXT_NOVIEW;
    } else if ((g_py.torch_tensor != NULL || (ext_find_torch(), g_py.torch_tensor != NULL)) &&
               PyObject_TypeCheck(obj, (PyTypeObject *)g_py.torch_tensor)) {
        r = ext_from_torch(obj, writable, a);
    } else if (PyObject_HasAttr(obj, g_py.s_dlpack)) {
        r = ext_from_dlpack(obj, a);
    } else {
        r = EXT_NOVIEW;
    }
    if (r == 0 && want >= 0 && (int)a->t.dtype != want)
        r = EXT_NOVIEW;
    return r;
}

static void ext_dl_set_error(void *unused, const char *kind, const char *message) {
    PyErr_Format(PyExc_RuntimeError, "attn._ext: torch could not allocate an output (%s: %s)", kind, message);
}

/* A new zero-filled torch CPU tensor of `shape` and attn `dtype` through torch's exchange table (no Python
 * call), or NULL: with an exception set when torch failed, without one when the table cannot make it. */
static PyObject *ext_torch_alloc(int ndim, const int64_t *shape, int dtype) {
    static const ext_dl_dtype dl[16] = {[ATTN_DTYPE_F32] = {EXT_DL_FLOAT, 32, 1},
                                        [ATTN_DTYPE_F16] = {EXT_DL_FLOAT, 16, 1},
                                        [ATTN_DTYPE_BF16] = {EXT_DL_BFLOAT, 16, 1},
                                        [ATTN_DTYPE_I32] = {EXT_DL_INT, 32, 1},
                                        [ATTN_DTYPE_I64] = {EXT_DL_INT, 64, 1}};
    if (dtype < 0 || dtype >= 16 || dl[dtype].bits == 0)
        return NULL;
    ext_dl_tensor proto = {NULL, {EXT_DL_CPU, 0}, ndim, dl[dtype], (int64_t *)shape, NULL, 0};
    ext_dl_versioned *m = NULL;
    void *obj = NULL;
    if (g_py.torch_api->allocate(&proto, &m, NULL, ext_dl_set_error) != 0 || m == NULL)
        return NULL;
    const ext_dl_tensor *t = &m->dl_tensor;
    const int64_t item = (int64_t)attn_dtype_size((attn_dtype)dtype);
    int64_t n = item; /* bytes (the allocation exists, so they fit) */
    int contiguous = t->data != NULL && t->ndim == ndim;
    for (int i = ndim - 1; contiguous && i >= 0; n *= shape[i--])
        contiguous = t->shape[i] == shape[i] && (t->strides == NULL || shape[i] <= 1 || t->strides[i] * item == n);
    if (contiguous)
        memset((char *)t->data + t->byte_offset, 0, (size_t)n);
    if (!contiguous || g_py.torch_api->to_py(m, &obj) != 0) { /* (to_py takes m over, also when it fails) */
        if (!contiguous)
            ext_dl_release(m);
        return NULL;
    }
    return (PyObject *)obj;
}

/* A new array of `shape` and attn `dtype` like `like` (a torch tensor for a torch `like`, else NumPy),
 * converted to a writable view in `a`. Returns the new reference or NULL with a Python error set. */
static PyObject *ext_alloc(PyObject *like, int ndim, const int64_t *shape, int dtype, ext_arg *a) {
    if (g_py.torch_api != NULL && PyObject_TypeCheck(like, (PyTypeObject *)g_py.torch_tensor)) { /* (set together) */
        PyObject *res = ext_torch_alloc(ndim, shape, dtype);
        if (res == NULL && PyErr_Occurred())
            return NULL;
        if (res != NULL && ext_tensor(res, 1, dtype, a) == 0)
            return res;
        Py_XDECREF(res); /* (a view that fails here is made below, as without the table) */
        ext_arg_release(a);
        PyErr_Clear();
    }
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

/* A Python int (not bool) in [lo, hi]; anything else is EXT_NOVIEW (the Python normalizer takes it). */
static int ext_int(PyObject *o, long long lo, long long hi, long long *out) {
    if (!PyLong_CheckExact(o))
        return EXT_NOVIEW;
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return EXT_NOVIEW;
    }
    if (v < lo || v > hi)
        return EXT_NOVIEW;
    *out = v;
    return 0;
}

/* causal as ops._causal_value (flash = 0: None/bool/0/1/2) or flash._flash_causal (flash = 1: None/bool/0/1;
 * True = bottom-right). Strings and NumPy scalars: EXT_NOVIEW. */
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
        return EXT_NOVIEW;
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
        return EXT_NOVIEW;
    int32_t *dst[2] = {left, right};
    for (int i = 0; i < 2; i++) {
        PyObject *w = PySequence_Fast_GET_ITEM(o, i);
        if (!PyLong_CheckExact(w))
            return EXT_NOVIEW;
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(w, &overflow);
        if (overflow < 0 || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return EXT_NOVIEW;
        }
        if (overflow > 0 || v > INT32_MAX) {
            *dst[i] = -1;
        } else if (v < -1) {
            return EXT_NOVIEW;
        } else {
            *dst[i] = (int32_t)v;
        }
    }
    return 0;
}

/* Per-head float32 vector (alibi_slopes, sinks): None, or a contiguous 1-D float32 array of num_heads
 * entries (num_heads < 0: unknown: EXT_NOVIEW, the Python check needs it). */
static int ext_per_head(PyObject *o, int64_t num_heads, ext_arg *a, const float **out) {
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    if (num_heads < 0 || ext_tensor(o, 0, ATTN_DTYPE_F32, a) != 0)
        return EXT_NOVIEW;
    if (a->t.ndim != 1 || a->t.shape[0] != num_heads || (num_heads > 1 && a->t.strides[0] != 1))
        return EXT_NOVIEW;
    *out = (const float *)a->t.data;
    return 0;
}

/* ================================================================================================
 * Calls and errors
 * ================================================================================================ */

/* Sets the AttnError subclass of a non-OK status with this thread's attn_last_error() (the exception
 * object comes from attn._capi.make_error). Returns NULL. */
static PyObject *ext_raise(attn_status status, const char *function) {
    const char *msg = attn_last_error();
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
        attn_clear_error();                                                                                            \
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

#define EXT_NARGS(name, want)                                                                                          \
    if (nargs != (want)) {                                                                                             \
        PyErr_Format(PyExc_TypeError, "attn._ext." name " takes %d arguments (%zd given)", (int)(want), nargs);        \
        return NULL;                                                                                                   \
    }

/* (defined with the generic entries below) */
static PyObject *g_as_view, *g_refuse;
static int ext_handle_of(PyObject *obj, const char *what, void **out);
static int ext_conv_int(PyObject *obj, const char *fn, const char *name, int64_t lo, int64_t hi, int64_t *out);
static PyObject *ext_status(attn_status st, const char *fn);

/* The start of a hot entry: the truth values of want_lse (args[lse_i]) and, with ref_i >= 0, of reference, then the
 * context handle args[0] (the oracle needs none). 0, or -1 with the first error (a failing truth value's own,
 * e.g. a NumPy array's: the second flag is then not read). */
static int ext_begin(PyObject *const *args, int lse_i, int ref_i, int *want_lse, int *reference, void **ctx) {
    *reference = 0;
    if ((*want_lse = PyObject_IsTrue(args[lse_i])) < 0 ||
        (ref_i >= 0 && (*reference = PyObject_IsTrue(args[ref_i])) < 0))
        return -1;
    return *reference ? 0 : ext_handle_of(args[0], "Context", ctx);
}

/* A function of an attn module (the slow paths: conversions C leaves to Python). New reference. */
static PyObject *ext_pyfn(const char *module, const char *name) {
    PyObject *m = PyImport_ImportModule(module);
    if (m == NULL)
        return NULL;
    PyObject *f = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    return f;
}

/* Raises the family's exception with a formatted message: attn._arrays._type_error's AttnTypeError when
 * `type_error`, else attn._capi.make_error(status). Returns NULL. */
static PyObject *ext_error(int type_error, attn_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    PyObject *f = type_error && msg ? ext_pyfn("attn._arrays", "_type_error") : NULL;
    PyObject *exc = !msg         ? NULL
                    : type_error ? (f ? PyObject_CallOneArg(f, msg) : NULL)
                                 : PyObject_CallFunction(g_py.make_error, "iO", (int)status, msg);
    if (exc != NULL)
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(exc);
    Py_XDECREF(f);
    Py_XDECREF(msg);
    return NULL;
}

/* ext_tensor, else what attn._arrays makes of `obj` (index arrays: index_array to `want`'s width, others:
 * as_view), else the family's error naming the argument. 0, or -1 with an exception set. */
static int ext_tensor_n(PyObject *obj, int writable, int want, const char *name, ext_arg *a) {
    if (ext_tensor(obj, writable, want, a) == 0)
        return 0;
    ext_arg_release(a);
    PyErr_Clear();
    PyObject *src, *wr = writable ? Py_True : Py_False;
    if (want == ATTN_DTYPE_I32 || want == ATTN_DTYPE_I64) {
        PyObject *f = ext_pyfn("attn._arrays", "index_array");
        src = f ? PyObject_CallFunction(f, "OsO", obj, name, g_py.np_dtype[want]) : NULL;
        Py_XDECREF(f);
    } else {
        src = PyObject_CallFunction(g_as_view, "OsO", obj, name, wr);
    }
    if (src == NULL)
        return -1;
    if (ext_tensor(src, writable, want, a) != 0) {
        ext_arg_release(a);
        PyErr_Clear();
        PyObject *r = PyObject_CallFunction(g_refuse, "OsO", src, name, wr);
        Py_XDECREF(r);
        Py_DECREF(src);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s: expected a %s array", name, want >= 0 ? attn_dtype_name(want) : "");
        return -1;
    }
    a->src = src;
    return 0;
}

/* Optional tensor: None -> *p = NULL. */
static int ext_opt_tensor_n(PyObject *obj, int writable, int want, const char *name, ext_arg *a, attn_tensor **p) {
    *p = NULL;
    if (obj == Py_None)
        return 0;
    *p = &a->t;
    return ext_tensor_n(obj, writable, want, name, a);
}

/* `fn`(arg) of attn.ops / attn.flash: the normalizer of an option C did not take (its error, if any). */
static PyObject *ext_normalize(const char *module, const char *fn, PyObject *arg) {
    PyObject *f = ext_pyfn(module, fn);
    PyObject *r = f ? PyObject_CallOneArg(f, arg) : NULL;
    Py_XDECREF(f);
    return r;
}

/* o (a Python number) as a float32 into *out. A finite value beyond float32's range is a ValueError naming the
 * argument (the C conversion would be undefined); NaN and ±inf pass, for libattn to accept or refuse. 0, or -1
 * with an exception set. */
static int ext_float(PyObject *o, const char *name, float *out) {
    const double d = PyFloat_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred())
        return -1;
    if (isfinite(d) && fabs(d) > FLT_MAX) {
        char msg[160]; /* (PyErr_Format has no %g) */
        snprintf(msg, sizeof msg, "%s=%g is beyond float32 (largest finite %g)", name, d, (double)FLT_MAX);
        PyErr_SetString(PyExc_ValueError, msg);
        return -1;
    }
    *out = (float)d;
    return 0;
}

/* The options every attention entry shares: o = (softmax_scale, causal, window_size, softcap, alibi_slopes,
 * sinks) -> attn_params. What C does not take directly (a causal name, NumPy integers, lists of slopes) goes
 * through the Python normalizers of attn.ops / attn.flash, which also raise their errors. keep[0..1] hold the
 * per-head arrays. 0, or -1 with an exception set. */
static int ext_options(PyObject *const *o, int flash, int64_t num_heads, ext_arg keep[2], attn_params *p) {
    *p = g_params_default;
    if (o[0] != Py_None) {
        float f;
        if (ext_float(o[0], "softmax_scale", &f) != 0)
            return -1;
        /* a zero scale (flash-attn, SDPA: uniform weights): attn_params' 0 means "default", so the smallest
         * positive float stands for it (its logits are below 2^-126: exp2 of their differences is exactly 1) */
        p->softmax_scale = f == 0.0f ? FLT_TRUE_MIN : f;
    }
    if (ext_causal(o[1], flash, &p->causal) != 0) {
        PyObject *r = ext_normalize(flash ? "attn.flash" : "attn.ops", flash ? "_flash_causal" : "_causal_value", o[1]);
        if (r == NULL)
            return -1;
        p->causal = (int32_t)PyLong_AsLong(r);
        Py_DECREF(r);
    }
    if (ext_window(o[2], &p->window_left, &p->window_right) != 0) {
        PyErr_Clear();
        PyObject *r = ext_normalize("attn.ops", "_window_value", o[2]);
        if (r == NULL || !PyArg_ParseTuple(r, "ii", &p->window_left, &p->window_right)) {
            Py_XDECREF(r);
            return -1;
        }
        Py_DECREF(r);
    }
    if (o[3] != Py_None && ext_float(o[3], "softcap", &p->softcap) != 0)
        return -1;
    static const char *names[2] = {"alibi_slopes", "sinks"};
    const float **vec[2] = {&p->alibi_slopes, &p->sinks};
    for (int i = 0; i < 2; i++) {
        if (ext_per_head(o[4 + i], num_heads, &keep[i], vec[i]) == 0)
            continue;
        ext_arg_release(&keep[i]);
        PyErr_Clear();
        PyObject *f = ext_pyfn("attn.ops", "_per_head");
        PyObject *nh = num_heads >= 0 ? PyLong_FromLongLong(num_heads) : Py_NewRef(Py_None);
        PyObject *r = f && nh ? PyObject_CallFunction(f, "OsO", o[4 + i], names[i], nh) : NULL;
        Py_XDECREF(f);
        Py_XDECREF(nh);
        if (r == NULL)
            return -1;
        const int bad = ext_tensor(r, 0, ATTN_DTYPE_F32, &keep[i]);
        keep[i].src = r;
        if (bad) {
            PyErr_Format(PyExc_ValueError, "%s: expected a float32 [num_heads] array", names[i]);
            return -1;
        }
        *vec[i] = (const float *)keep[i].t.data;
    }
    return 0;
}

/* o = (mask, key_padding_mask, additive_mask) -> p (views kept in keep[0..2]); a float `mask` is additive, as
 * torch SDPA's attn_mask. 0, or -1 with an exception set. */
static int ext_masks(PyObject *const *o, ext_arg keep[3], attn_params *p) {
    attn_tensor *mask, *kpm, *add;
    if (ext_opt_tensor_n(o[0], 0, -1, "params.mask", &keep[0], &mask) ||
        ext_opt_tensor_n(o[1], 0, -1, "params.key_padding_mask", &keep[1], &kpm) ||
        ext_opt_tensor_n(o[2], 0, -1, "params.additive_mask", &keep[2], &add))
        return -1;
    if (mask != NULL &&
        (mask->dtype == ATTN_DTYPE_F32 || mask->dtype == ATTN_DTYPE_F16 || mask->dtype == ATTN_DTYPE_BF16)) {
        if (add != NULL) {
            PyErr_SetString(PyExc_ValueError, "mask: a float mask is additive; pass it or additive_mask=, not both");
            return -1;
        }
        add = mask;
        mask = NULL;
    }
    p->mask = mask;
    p->key_padding_mask = kpm;
    p->additive_mask = add;
    return 0;
}

static int ext_bad_shape(const char *name, const attn_tensor *t, const char *what);

/* An fp8 scale of `cache` [2, num_blocks, block_size, num_kv_heads, head_size], read only when the cache holds
 * fp8 codes (a float cache ignores it, as vLLM's "auto" does): None (1), a number (per tensor) or a float32
 * [num_kv_heads] array (per KV head: *per); another shape raises ValueError naming the argument. */
static int ext_scale(PyObject *o, const char *name, const attn_tensor *cache, ext_arg *keep, float *f,
                     const float **per) {
    *f = 1.0f;
    *per = NULL;
    if (o == Py_None || (cache->dtype != ATTN_DTYPE_FP8_E4M3 && cache->dtype != ATTN_DTYPE_FP8_E5M2))
        return 0;
    if (PyFloat_Check(o) || PyLong_Check(o))
        return ext_float(o, name, f);
    if (ext_tensor_n(o, 0, ATTN_DTYPE_F32, name, keep) != 0)
        return -1;
    const int64_t heads = cache->ndim == 5 ? cache->shape[3] : -1;
    if (keep->t.ndim != 1 || keep->t.shape[0] != heads || (heads > 1 && keep->t.strides[0] != 1)) {
        char what[128];
        snprintf(what, sizeof what,
                 "a scalar (one scale per tensor) or a contiguous [num_kv_heads] = [%lld] (one "
                 "scale per KV head)",
                 (long long)heads);
        return ext_bad_shape(name, &keep->t, what);
    }
    *per = (const float *)keep->t.data;
    return 0;
}

/* kv_cache_dtype (None, "auto", "fp8", "fp8_e4m3", "fp8_e5m2": vLLM's names) of `n` cache tensors: a uint8
 * one is read as the named fp8 format (vLLM's allocation); another dtype that is not that format raises a
 * TypeError of the family (AttnTypeError) naming the cache. */
static PyObject *ext_dtype_str(attn_dtype d);

static int ext_kv_dtype(PyObject *name, const char *const *names, attn_tensor **ts, int n) {
    if (name == Py_None)
        return 0;
    const char *s = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    int code = -2;
    if (s != NULL)
        code = !strcmp(s, "auto")                              ? -1
               : (!strcmp(s, "fp8") || !strcmp(s, "fp8_e4m3")) ? ATTN_DTYPE_FP8_E4M3
               : !strcmp(s, "fp8_e5m2")                        ? ATTN_DTYPE_FP8_E5M2
                                                               : -2;
    PyErr_Clear();
    if (code == -2) { /* its NotImplementedError */
        PyObject *r = ext_normalize("attn.ops", "kv_cache_dtype_code", name);
        Py_XDECREF(r);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_NotImplementedError, "kv_cache_dtype=%R is not supported", name);
        return -1;
    }
    for (int i = 0; code >= 0 && i < n; i++) {
        if (ts[i] == NULL || ts[i]->dtype == (attn_dtype)code)
            continue;
        if (ts[i]->dtype == ATTN_DTYPE_U8) {
            ts[i]->dtype = (attn_dtype)code;
            continue;
        }
        PyObject *have = ext_dtype_str(ts[i]->dtype);
        if (have != NULL)
            ext_error(1, ATTN_STATUS_INVALID_ARGUMENT,
                      "%s: dtype %S does not hold kv_cache_dtype=%R (expected uint8 "
                      "or that float8)",
                      names[i], have, name);
        Py_XDECREF(have);
        return -1;
    }
    return 0;
}

/* Output `out` (given or allocated like `like` with `shape` and dtype `dtype`) and optional LSE (given,
 * allocated float32 `lse_shape` when lse_ndim >= 0, or none). On success *out_obj / *lse_obj are new
 * references; -1 with an exception set otherwise. */
static int ext_outputs(PyObject *like, PyObject *out, int ndim, const int64_t *shape, int dtype, PyObject *lse,
                       int want_lse, int lse_ndim, const int64_t *lse_shape, ext_arg *ao, ext_arg *al,
                       PyObject **out_obj, PyObject **lse_obj, attn_tensor **lse_t) {
    *out_obj = *lse_obj = NULL;
    *lse_t = NULL;
    if (out != Py_None) {
        if (ext_tensor_n(out, 1, -1, "out", ao) != 0)
            return -1;
        *out_obj = Py_NewRef(out);
    }
    if (want_lse && lse != Py_None) {
        if (ext_tensor_n(lse, 1, -1, "lse", al) != 0)
            return -1;
        *lse_obj = Py_NewRef(lse);
        *lse_t = &al->t;
    }
    if (*out_obj == NULL) {
        *out_obj = ext_alloc(like, ndim, shape, dtype, ao);
        if (*out_obj == NULL)
            return -1;
    }
    if (want_lse && *lse_obj == NULL && lse_ndim >= 0) {
        *lse_obj = ext_alloc(like, lse_ndim, lse_shape, ATTN_DTYPE_F32, al);
        if (*lse_obj == NULL)
            return -1;
        *lse_t = &al->t;
        /* -inf where no call writes (rows outside every sequence), as out is 0 there (ext_alloc zero-fills) */
        int64_t n = 1;
        for (int i = 0; i < lse_ndim; i++)
            n *= lse_shape[i];
        float *d = (float *)al->t.data;
        for (int64_t i = 0; i < n; i++)
            d[i] = -INFINITY;
    }
    return 0;
}

/* Releases the arguments and outputs of a failed call; NULL. */
static PyObject *ext_fail(ext_arg *args, int n, PyObject *out, PyObject *lse) {
    ext_release_all(args, n);
    Py_XDECREF(out);
    Py_XDECREF(lse);
    return NULL;
}

/* The end of an attention entry: release, raise from a failing status, else out or (out, lse). */
static PyObject *ext_finish(attn_status st, const char *fn, ext_arg *args, int n, PyObject *out, PyObject *lse,
                            int want_lse) {
    ext_release_all(args, n);
    if (st != ATTN_STATUS_OK) {
        Py_XDECREF(out);
        Py_XDECREF(lse);
        return ext_raise(st, fn);
    }
    return ext_result(out, lse, want_lse);
}

/* Row stride of dims d and d+1 of `t` merged into one without a copy (NumPy reshape rules), or -1. */
static int64_t ext_merge_stride(const attn_tensor *t, int d) {
    if (t->shape[d + 1] == 1)
        return t->strides[d];
    if (t->shape[d] == 1 || t->strides[d] == t->shape[d + 1] * t->strides[d + 1])
        return t->strides[d + 1];
    return -1;
}

/* The shape of `t` as a Python list (for messages). */
static PyObject *ext_shape(const attn_tensor *t) {
    PyObject *l = PyList_New(t->ndim);
    for (int i = 0; l != NULL && i < t->ndim; i++)
        PyList_SET_ITEM(l, i, PyLong_FromLongLong(t->shape[i]));
    return l;
}

/* ValueError "`name`: shape [...], expected `what`"; -1. */
static int ext_bad_shape(const char *name, const attn_tensor *t, const char *what) {
    PyObject *s = ext_shape(t);
    if (s != NULL)
        PyErr_Format(PyExc_ValueError, "%s: shape %R, expected %s", name, s, what);
    Py_XDECREF(s);
    return -1;
}

/* 0 if `t` has `ndim` dims of sizes want[] (-1: any), else -1 with ValueError "name: shape [..], expected [..]". */
static int ext_expect(const char *name, const attn_tensor *t, int ndim, const int64_t *want) {
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = want[i] < 0 || t->shape[i] == want[i];
    if (ok)
        return 0;
    char buf[160];
    size_t n = 0;
    for (int i = 0; i < ndim && n < sizeof buf - 24; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, want[i] < 0 ? "%s*" : "%s%lld", i ? ", " : "",
                              (long long)want[i]);
    buf[n] = '\0';
    PyObject *s = ext_shape(t);
    if (s != NULL)
        PyErr_Format(PyExc_ValueError, "%s: shape %R, expected [%s]", name, s, buf);
    Py_XDECREF(s);
    return -1;
}

/* The NumPy name of an attn dtype (its attn name without NumPy's dtype), new reference. */
static PyObject *ext_dtype_str(attn_dtype d) {
    PyObject *np_dt = (unsigned)d < 16 ? g_py.np_dtype[d] : NULL;
    return np_dt ? PyObject_Str(np_dt) : PyUnicode_FromString(attn_dtype_name(d));
}

/* Copies the 4-D view `t` to (into_buf) or from a contiguous buffer, a row of its last dimension at a time (a
 * cache view: libattn wants that dimension contiguous; any stride is copied element by element). */
static void ext_copy4(const attn_tensor *t, char *buf, int into_buf) {
    const size_t item = attn_dtype_size(t->dtype);
    const int64_t n = t->shape[3], step = n > 1 && t->strides[3] != 1 ? 1 : n;
    for (int64_t i = 0; i < t->shape[0]; i++)
        for (int64_t j = 0; j < t->shape[1]; j++)
            for (int64_t h = 0; h < t->shape[2]; h++)
                for (int64_t d = 0; d < n; d += step, buf += (size_t)step * item) {
                    char *p =
                        (char *)t->data +
                        (size_t)(i * t->strides[0] + j * t->strides[1] + h * t->strides[2] + d * t->strides[3]) * item;
                    memcpy(into_buf ? buf : p, into_buf ? p : buf, (size_t)step * item);
                }
}

/* `t` [d0, ...] as a [2, d0, ...] view whose two halves are `t` itself (stride 0). */
static void ext_doubled(const attn_tensor *t, attn_tensor *kv) {
    *kv = *t;
    kv->ndim = t->ndim + 1;
    kv->shape[0] = 2;
    kv->strides[0] = 0;
    for (int i = 0; i < t->ndim && i + 1 < ATTN_MAX_DIMS; i++) {
        kv->shape[i + 1] = t->shape[i];
        kv->strides[i + 1] = t->strides[i];
    }
}

/* 1 when the bytes two views span (first to last element, any stride signs) intersect; an empty view spans none. */
static int ext_spans_meet(const attn_tensor *x, const attn_tensor *y) {
    uintptr_t lo[2], hi[2];
    const attn_tensor *t[2] = {x, y};
    for (int i = 0; i < 2; i++) {
        const int64_t item = (int64_t)attn_dtype_size(t[i]->dtype);
        int64_t a = 0, b = item;
        for (int d = 0; d < t[i]->ndim; d++) {
            if (t[i]->shape[d] == 0)
                return 0;
            const int64_t reach = (t[i]->shape[d] - 1) * t[i]->strides[d] * item;
            if (reach < 0)
                a += reach;
            else
                b += reach;
        }
        lo[i] = (uintptr_t)t[i]->data + (uintptr_t)a, hi[i] = (uintptr_t)t[i]->data + (uintptr_t)b;
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

/* 1 when v has k's shape and strides and lies a whole number of elements away from it (*s0: that distance, of
 * either sign), so that the two are one [2, ...] view with strides[0] = *s0 (libattn takes two allocations so). */
static int ext_pair_stride(const attn_tensor *k, const attn_tensor *v, int64_t *s0) {
    const int64_t item = (int64_t)attn_dtype_size(k->dtype);
    const intptr_t delta = (intptr_t)((uintptr_t)v->data - (uintptr_t)k->data);
    if (item <= 0 || k->ndim != v->ndim || delta % item != 0)
        return 0;
    for (int i = 0; i < k->ndim; i++)
        if (k->shape[i] != v->shape[i] || (k->shape[i] > 1 && k->strides[i] != v->strides[i]))
            return 0;
    *s0 = (int64_t)(delta / item);
    return 1;
}

/* k / v caches [num_blocks, block_size, num_kv_heads, head_size] (named kn / vn) as the [2, ...] kv_cache libattn
 * takes, in *kv: caches with the same strides are viewed in place, strides[0] the element distance from k to v
 * (negative when v lies below k: two separate allocations, the usual flash-attn call, are read and written where
 * they are). Without `copy` (a cache write) only the halves of one tensor are viewed, and 1 is returned for two
 * allocations (the caller writes each cache on its own). Otherwise (strides that differ, a distance that is not a
 * whole number of elements; with `flat`, also a cache whose rows do not run evenly across blocks) 1 when copy is
 * NULL, else both are copied into one contiguous buffer, *copy (PyMem). 0 for a view or a copy, -1 with an
 * exception naming the argument. */
static int ext_join(const attn_tensor *k, const attn_tensor *v, const char *kn, const char *vn, int flat,
                    attn_tensor *kv, void **copy) {
    if (copy != NULL)
        *copy = NULL;
    if (k->ndim != 4)
        return ext_bad_shape(kn, k, "4-D [num_blocks, block_size, nheads_k, headdim]");
    int same = k->dtype == v->dtype && v->ndim == 4;
    for (int i = 0; same && i < (copy ? 4 : 2); i++) /* (writes: each cache takes its own heads) */
        same = k->shape[i] == v->shape[i];
    if (!same) {
        PyObject *ks = ext_shape(k), *vs = ext_shape(v), *kd = ext_dtype_str(k->dtype), *vd = ext_dtype_str(v->dtype);
        if (ks && vs && kd && vd)
            PyErr_Format(PyExc_ValueError, "%s: shape %R does not match %s: shape %R (or %s: dtype %S differs from %S)",
                         vn, vs, kn, ks, vn, vd, kd);
        Py_XDECREF(ks);
        Py_XDECREF(vs);
        Py_XDECREF(kd);
        Py_XDECREF(vd);
        return -1;
    }
    const int64_t item = (int64_t)attn_dtype_size(k->dtype);
    int64_t extent = 1, n = 1, s0 = 0;
    for (int i = 0; i < 4; i++) {
        extent += k->shape[i] > 0 ? (k->shape[i] - 1) * k->strides[i] : 0;
        n *= k->shape[i];
    }
    const int pair = ext_pair_stride(k, v, &s0);
    ext_doubled(k, kv);
    kv->strides[0] = n == 0 ? 0 : s0;
    /* the halves of one tensor as they are; two allocations for a reader when aligned to their elements (others
     * are copied into an aligned buffer); a writer, copy == NULL, writes two allocations one by one */
    const int wide = copy != NULL && (uintptr_t)k->data % (uintptr_t)item == 0;
    if (n == 0 || (pair && ((s0 >= 0 && s0 <= extent) || wide) && (!flat || ext_merge_stride(kv, 1) >= 0)))
        return 0;
    if (copy == NULL)
        return 1;
    size_t bytes = 0;
    if (n > (int64_t)(PY_SSIZE_T_MAX / 2 / item) || (*copy = PyMem_Malloc(bytes = (size_t)(2 * n * item))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    ext_copy4(k, (char *)*copy, 1);
    ext_copy4(v, (char *)*copy + bytes / 2, 1);
    kv->data = *copy;
    for (int64_t i = 4, s = 1; i >= 0; s *= kv->shape[i--])
        kv->strides[i] = s;
    return 0;
}

/* Element [i] of a 1-D int32 view. */
#define EXT_I32_1(t, i) (((const int32_t *)(t)->data)[(i) * (t)->strides[0]])

/* ================================================================================================
 * Hot entries (METH_FASTCALL; argument order fixed by python/attn/ops.py, flash.py, vllm_ops.py)
 * ================================================================================================ */

/* paged_attention(ctx, q, kv_cache, query_start_loc, seq_lens, block_table, softmax_scale, causal,
 *                 window_size, softcap, alibi_slopes, sinks, out, lse, want_lse, kv_cache_dtype, k_scale,
 *                 v_scale, reference)
 * q [num_tokens, num_heads, head_size]; kv_cache [2, num_blocks, block_size, num_kv_heads, head_size];
 * query_start_loc / seq_lens / block_table int32. out like q (allocated if None); lse float32 [num_heads,
 * num_tokens]. kv_cache_dtype / scales as ext_kv_dtype / ext_scale. reference: the float64 oracle.
 * Returns out or (out, lse). */
static PyObject *ext_paged_attention(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("paged_attention", 19);
    enum { Q, KV, QSL, SL, BT, OUT, LSE, AL, SI, KS, VS, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx = NULL;
    attn_params p;
    PyObject *out = NULL, *lse = NULL;
    attn_tensor *lse_t, *cache[1];
    int want_lse, reference;
    if (ext_begin(args, 14, 18, &want_lse, &reference, &ctx))
        return NULL;
    static const char *cache_name[1] = {"kv_cache"};
    if (ext_tensor_n(args[1], 0, -1, "q", &a[Q]) || ext_tensor_n(args[2], 0, -1, "kv_cache", &a[KV]) ||
        ext_tensor_n(args[3], 0, ATTN_DTYPE_I32, "query_start_loc", &a[QSL]) ||
        ext_tensor_n(args[4], 0, ATTN_DTYPE_I32, "seq_lens", &a[SL]) ||
        ext_tensor_n(args[5], 0, ATTN_DTYPE_I32, "block_table", &a[BT]) ||
        ext_options(&args[6], 0, a[Q].t.ndim == 3 ? a[Q].t.shape[1] : -1, &a[AL], &p) ||
        (cache[0] = &a[KV].t, ext_kv_dtype(args[15], cache_name, cache, 1)) ||
        ext_scale(args[16], "k_scale", &a[KV].t, &a[KS], &p.k_scale, &p.k_scales) ||
        ext_scale(args[17], "v_scale", &a[KV].t, &a[VS], &p.v_scale, &p.v_scales))
        return ext_fail(a, N, NULL, NULL);
    const attn_tensor *q = &a[Q].t;
    const int64_t lse_shape[2] = {q->ndim == 3 ? q->shape[1] : 0, q->shape[0]};
    if (ext_outputs(args[1], args[12], q->ndim, q->shape, q->dtype, args[13], want_lse, q->ndim == 3 ? 2 : -1,
                    lse_shape, &a[OUT], &a[LSE], &out, &lse, &lse_t))
        return ext_fail(a, N, out, lse);
    attn_status st;
    if (reference)
        EXT_CALL(st, attn_ref_paged_attention(q, &a[KV].t, &a[QSL].t, &a[SL].t, &a[BT].t, &p, &a[OUT].t, lse_t));
    else
        EXT_CALL(st, attn_paged_attention((attn_ctx *)ctx, q, &a[KV].t, &a[QSL].t, &a[SL].t, &a[BT].t, &p, &a[OUT].t,
                                          lse_t));
    return ext_finish(st, reference ? "attn_ref_paged_attention" : "attn_paged_attention", a, N, out, lse, want_lse);
}

/* forward_paged(ctx, plan, num_heads, q, kv_cache, key, value, softmax_scale, causal, window_size, softcap,
 *               alibi_slopes, sinks, out, lse, want_lse, workspace_ptr, workspace_size, kv_cache_dtype,
 *               k_scale, v_scale)
 * One layer of a planned step (attn_forward_paged); shapes as paged_attention, key/value optional
 * [num_tokens, num_kv_heads, head_size] (read as the cache's fp8 format with kv_cache_dtype). The
 * workspace is the Plan's (allocated once per plan); the per-head options are checked against num_heads
 * (the plan's: libattn checks q against the plan before it reads them). */
static PyObject *ext_forward_paged(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("forward_paged", 21);
    enum { Q, KV, K, V, OUT, LSE, AL, SI, KS, VS, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx, *plan, *ws = NULL;
    attn_tensor *tk, *tv, *lse_t, *ts[3];
    attn_params p;
    PyObject *out = NULL, *lse = NULL;
    long long num_heads = 0, ws_size = 0;
    int want_lse, reference;
    static const char *names[3] = {"kv_cache", "key", "value"};
    if (ext_begin(args, 15, -1, &want_lse, &reference, &ctx) || ext_handle_of(args[1], "Plan", &plan) ||
        ext_int(args[2], 0, INT32_MAX, &num_heads) || ext_int(args[17], 0, LLONG_MAX, &ws_size) ||
        (ws_size > 0 && ext_handle_of(args[16], "workspace", &ws))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "forward_paged: num_heads / workspace must be Python ints");
        return NULL;
    }
    if (ext_tensor_n(args[3], 0, -1, "q", &a[Q]) || ext_tensor_n(args[4], 0, -1, "kv_cache", &a[KV]) ||
        ext_opt_tensor_n(args[5], 0, -1, "key", &a[K], &tk) || ext_opt_tensor_n(args[6], 0, -1, "value", &a[V], &tv) ||
        ext_options(&args[7], 0, num_heads, &a[AL], &p) ||
        (ts[0] = &a[KV].t, ts[1] = tk, ts[2] = tv, ext_kv_dtype(args[18], names, ts, 3)) ||
        ext_scale(args[19], "k_scale", &a[KV].t, &a[KS], &p.k_scale, &p.k_scales) ||
        ext_scale(args[20], "v_scale", &a[KV].t, &a[VS], &p.v_scale, &p.v_scales))
        return ext_fail(a, N, NULL, NULL);
    const attn_tensor *q = &a[Q].t;
    const int64_t lse_shape[2] = {q->ndim == 3 ? q->shape[1] : 0, q->shape[0]};
    if (ext_outputs(args[3], args[13], q->ndim, q->shape, q->dtype, args[14], want_lse, q->ndim == 3 ? 2 : -1,
                    lse_shape, &a[OUT], &a[LSE], &out, &lse, &lse_t))
        return ext_fail(a, N, out, lse);
    /* libattn checks q against the plan before it reads a slope or sink per q head; with q's heads other than
     * num_heads (the plan's) the arrays, sized for num_heads, are not handed over: the call then fails on q,
     * or, had num_heads not been the plan's, runs without them and raises here */
    const int heads_differ = q->ndim == 3 && q->shape[1] != num_heads && (p.alibi_slopes || p.sinks);
    if (heads_differ)
        p.alibi_slopes = p.sinks = NULL;
    attn_status st;
    EXT_CALL(st, attn_forward_paged((attn_ctx *)ctx, (const attn_plan *)plan, q, tk, tv, &a[KV].t, &p, &a[OUT].t, lse_t,
                                    ws, (size_t)ws_size));
    if (st == ATTN_STATUS_OK && heads_differ) {
        PyErr_Format(PyExc_ValueError, "num_heads=%lld is not q's %lld heads (alibi_slopes / sinks not applied)",
                     num_heads, (long long)q->shape[1]);
        return ext_fail(a, N, out, lse);
    }
    return ext_finish(st, "attn_forward_paged", a, N, out, lse, want_lse);
}

/* The KV-stored callback: on_stored(layer_idx, runs bytes (int64 [num_runs, 4]), num_tokens, num_written,
 * block_size) with the GIL held; its first exception is kept and raised after the C call returns. */
typedef struct ext_notify_user {
    PyObject *callback;
    PyObject *error[3]; /* (type, value, traceback) of the first failure, or NULLs */
} ext_notify_user;

static void ext_on_stored(void *user, const attn_kv_stored *ev) {
    ext_notify_user *u = (ext_notify_user *)user;
    PyGILState_STATE g = PyGILState_Ensure();
    int64_t cap = ev->num_runs > 0 ? ev->num_runs : 0, n = 0, cursor = 0;
    PyObject *runs = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(cap * 4 * 8));
    if (runs != NULL) {
        int64_t *d = (int64_t *)PyByteArray_AS_STRING(runs);
        attn_kv_block_rows r;
        while (n < cap && attn_kv_stored_next(ev, &cursor, &r)) {
            d[4 * n] = r.block_idx;
            d[4 * n + 1] = r.row_start;
            d[4 * n + 2] = r.row_end;
            d[4 * n + 3] = r.token_start;
            n++;
        }
        PyObject *res =
            PyObject_CallFunction(u->callback, "iOLLLL", ev->layer_idx, runs, (long long)n, (long long)ev->num_tokens,
                                  (long long)ev->num_written, (long long)ev->block_size);
        Py_XDECREF(res);
        Py_DECREF(runs);
    }
    if (PyErr_Occurred() && u->error[0] == NULL)
        PyErr_Fetch(&u->error[0], &u->error[1], &u->error[2]);
    PyErr_Clear();
    PyGILState_Release(g);
}

/* reshape_and_cache(ctx, key, value, kv_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale[, on_stored,
 *                   layer_idx])
 * key/value [num_tokens, num_kv_heads, head_size]; kv_cache [2, num_blocks, block_size, num_kv_heads,
 * head_size] (written in place); slot_mapping int64 [num_tokens]. An fp8 cache stores fp8(x / scale),
 * per tensor or per KV head (attn_reshape_and_cache_ex). on_stored None or the callable of ext_on_stored,
 * called once after the write with layer_idx (attn.kv_events). Returns None. */
static PyObject *ext_cache_write(PyObject *const *args, PyObject *const *caches, PyObject *const *notify);

static PyObject *ext_reshape_and_cache(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 && nargs != 10) {
        PyErr_Format(PyExc_TypeError, "attn._ext.reshape_and_cache takes 8 or 10 arguments (%zd given)", nargs);
        return NULL;
    }
    return ext_cache_write(args, NULL, nargs == 10 && args[8] != Py_None ? &args[8] : NULL);
}

/* vllm_reshape_and_cache(ctx, key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)
 * vLLM's write into key_cache / value_cache [num_blocks, block_size, num_kv_heads, head_size]: the halves of one
 * [2, ...] tensor are written as that tensor (one call); two separate allocations each through a [2, ...] view
 * whose halves alias, after a call without slots has let libattn check the values (nothing is written unless
 * both writes are valid). */
static PyObject *ext_vllm_reshape_and_cache(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("vllm_reshape_and_cache", 9);
    PyObject *const call[8] = {args[0], args[1], args[2], Py_None, args[5], args[6], args[7], args[8]};
    return ext_cache_write(call, &args[3], NULL);
}

/* reshape_and_cache's work; caches: key_cache and value_cache (vllm_reshape_and_cache), else args[3];
 * notify: (on_stored, layer_idx) or NULL. */
static PyObject *ext_cache_write(PyObject *const *args, PyObject *const *caches, PyObject *const *notify) {
    enum { K, V, KV, VKV, SM, KS, VS, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx;
    attn_cache_write_options o;
    attn_cache_write_options_init_sized(&o, sizeof o);
    attn_tensor kv, vkv, *ts[2] = {&kv, NULL};
    static const char *cache_name[1] = {"kv_cache"};
    int separate = 0;
    int64_t layer = 0;
    ext_notify_user u = {notify ? notify[0] : NULL, {NULL, NULL, NULL}};
    attn_kv_notify nt = {ext_on_stored, &u, 0};
    if (notify != NULL) {
        if (ext_conv_int(notify[1], "reshape_and_cache", "layer_idx", INT32_MIN, INT32_MAX, &layer))
            return NULL;
        nt.layer_idx = (int32_t)layer;
        o.notify = &nt;
    }
    if (ext_handle_of(args[0], "Context", &ctx) || ext_tensor_n(args[4], 0, ATTN_DTYPE_I64, "slot_mapping", &a[SM]) ||
        ext_tensor_n(args[1], 0, -1, "key", &a[K]) || ext_tensor_n(args[2], 0, -1, "value", &a[V]))
        return ext_fail(a, N, NULL, NULL);
    if (caches == NULL) {
        if (ext_tensor_n(args[3], 1, -1, "kv_cache", &a[KV]))
            return ext_fail(a, N, NULL, NULL);
        kv = a[KV].t;
    } else {
        if (ext_tensor_n(caches[0], 1, -1, "key_cache", &a[KV]) ||
            ext_tensor_n(caches[1], 1, -1, "value_cache", &a[VKV]) ||
            (separate = ext_join(&a[KV].t, &a[VKV].t, "key_cache", "value_cache", 0, &kv, NULL)) < 0)
            return ext_fail(a, N, NULL, NULL);
        if (separate) { /* key against value (the calls below see them apart): as one write would */
            ext_doubled(&a[KV].t, &kv);
            ext_doubled(&a[VKV].t, &vkv);
            ts[1] = &vkv;
            const attn_tensor *kt = &a[K].t, *vt = &a[V].t;
            for (int i = 0; i < 2; i++) {
                const attn_tensor *t = i ? vt : kt, *c = i ? &vkv : &kv;
                if (t->ndim != 3 || t->shape[1] != c->shape[3] || t->shape[2] != c->shape[4]) {
                    PyObject *sh = ext_shape(t);
                    if (sh)
                        PyErr_Format(PyExc_ValueError, "%s: shape %R, expected [num_tokens, %lld, %lld]",
                                     i ? "value" : "key", sh, (long long)c->shape[3], (long long)c->shape[4]);
                    Py_XDECREF(sh);
                    return ext_fail(a, N, NULL, NULL);
                }
            }
            if (vt->shape[0] != kt->shape[0] || vt->dtype != kt->dtype) {
                PyObject *vd = ext_dtype_str(vt->dtype), *kd = ext_dtype_str(kt->dtype);
                if (vd && kd && vt->shape[0] != kt->shape[0])
                    PyErr_Format(PyExc_ValueError, "value: %lld tokens, key: %lld tokens", (long long)vt->shape[0],
                                 (long long)kt->shape[0]);
                else if (vd && kd)
                    PyErr_Format(PyExc_TypeError, "value: dtype %S differs from key: dtype %S", vd, kd);
                Py_XDECREF(vd);
                Py_XDECREF(kd);
                return ext_fail(a, N, NULL, NULL);
            }
        }
    }
    static const char *cache_names[2] = {"key_cache", "value_cache"};
    if (ext_kv_dtype(args[5], separate ? cache_names : cache_name, ts, 1 + separate) ||
        ext_scale(args[6], "k_scale", &kv, &a[KS], &o.k_scale, &o.k_scales) ||
        ext_scale(args[7], "v_scale", &kv, &a[VS], &o.v_scale, &o.v_scales))
        return ext_fail(a, N, NULL, NULL);
    attn_status st;
    if (!separate) {
        EXT_CALL(st, attn_reshape_and_cache_ex((attn_ctx *)ctx, &a[K].t, &a[V].t, &kv, &a[SM].t, &o));
    } else { /* the values checked against their cache (no slot), then keys and values, each with its own scale */
        attn_cache_write_options ok = o, ov = o;
        ok.v_scale = o.k_scale, ok.v_scales = o.k_scales, ov.k_scale = o.v_scale, ov.k_scales = o.v_scales;
        attn_tensor none = a[SM].t;
        none.shape[0] = 0;
        EXT_CALL(st, attn_reshape_and_cache_ex((attn_ctx *)ctx, &a[K].t, &a[V].t, &vkv, &none, &ov));
        /* caches with the same strides: one write through a view over both allocations (strides[0] the distance
         * from one to the other); else each cache through its doubled view, which writes each row twice */
        int64_t s0; /* (kv / vkv: the doubled views, in the dtype ext_kv_dtype gave them) */
        if (st == ATTN_STATUS_OK && ext_pair_stride(&kv, &vkv, &s0)) {
            attn_tensor both = kv;
            both.strides[0] = s0;
            EXT_CALL(st, attn_reshape_and_cache_ex((attn_ctx *)ctx, &a[K].t, &a[V].t, &both, &a[SM].t, &o));
        } else {
            if (st == ATTN_STATUS_OK)
                EXT_CALL(st, attn_reshape_and_cache_ex((attn_ctx *)ctx, &a[K].t, &a[K].t, &kv, &a[SM].t, &ok));
            if (st == ATTN_STATUS_OK)
                EXT_CALL(st, attn_reshape_and_cache_ex((attn_ctx *)ctx, &a[V].t, &a[V].t, &vkv, &a[SM].t, &ov));
        }
    }
    ext_release_all(a, N);
    if (st == ATTN_STATUS_OK && u.error[0] != NULL) { /* the callback's exception, after the write */
        PyErr_Restore(u.error[0], u.error[1], u.error[2]);
        return NULL;
    }
    for (int i = 0; i < 3; i++)
        Py_XDECREF(u.error[i]);
    return ext_status(st, "attn_reshape_and_cache_ex");
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
    int want_lse, reference;
    if (ext_begin(args, 7, -1, &want_lse, &reference, &ctx) || ext_tensor_n(args[1], 0, -1, "out_a", &a[OA]) ||
        ext_tensor_n(args[2], 0, -1, "lse_a", &a[LA]) || ext_tensor_n(args[3], 0, -1, "out_b", &a[OB]) ||
        ext_tensor_n(args[4], 0, -1, "lse_b", &a[LB]))
        return ext_fail(a, N, NULL, NULL);
    const attn_tensor *oa = &a[OA].t, *la = &a[LA].t;
    if (ext_outputs(args[1], args[5], oa->ndim, oa->shape, oa->dtype, args[6], want_lse, la->ndim, la->shape, &a[OUT],
                    &a[LSE], &out, &lse, &lse_t))
        return ext_fail(a, N, out, lse);
    attn_status st;
    EXT_CALL(st, attn_merge_attn_states((attn_ctx *)ctx, oa, la, &a[OB].t, &a[LB].t, &a[OUT].t, lse_t));
    return ext_finish(st, "attn_merge_attn_states", a, N, out, lse, want_lse);
}

/* forward(ctx, layout, q, k, v, flash, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, out,
 *         lse, want_lse, mask, key_padding_mask, additive_mask, reference)
 * Dense attention (attn_forward, or the oracle attn_ref_forward). BSND: q [batch, seq_q, num_heads,
 * head_size], k/v [batch, seq_k, num_kv_heads, head_size(_v)]; BNSD swaps dims 1 and 2. out [.., head_size_v]
 * in q's dtype; lse float32 [batch, num_heads, seq_q]. mask: bool (keep) or float (added to the logits, as
 * torch SDPA's attn_mask); additive_mask: a float mask given explicitly. */
static PyObject *ext_forward(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("forward", 19);
    enum { Q, K, V, OUT, LSE, AL, SI, M, KP, AM, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx = NULL;
    int64_t layout;
    attn_params p;
    PyObject *out = NULL, *lse = NULL;
    attn_tensor *lse_t;
    int want_lse, reference;
    if (ext_begin(args, 14, 18, &want_lse, &reference, &ctx) ||
        ext_conv_int(args[1], "forward", "layout", INT32_MIN, INT32_MAX, &layout))
        return NULL;
    const int nd = layout == ATTN_LAYOUT_BSND ? 2 : 1, sd = 3 - nd;
    if (ext_tensor_n(args[2], 0, -1, "q", &a[Q]) || ext_tensor_n(args[3], 0, -1, "k", &a[K]) ||
        ext_tensor_n(args[4], 0, -1, "v", &a[V]) ||
        ext_options(&args[6], args[5] == Py_True, a[Q].t.ndim == 4 ? a[Q].t.shape[nd] : -1, &a[AL], &p) ||
        ext_masks(&args[15], &a[M], &p))
        return ext_fail(a, N, NULL, NULL);
    const attn_tensor *q = &a[Q].t, *v = &a[V].t;
    int64_t out_shape[ATTN_MAX_DIMS];
    memcpy(out_shape, q->shape, sizeof out_shape);
    if (q->ndim == 4 && v->ndim >= 1)
        out_shape[3] = v->shape[v->ndim - 1];
    const int64_t lse_shape[3] = {q->shape[0], q->ndim == 4 ? q->shape[nd] : 0, q->ndim == 4 ? q->shape[sd] : 0};
    if (ext_outputs(args[2], args[12], q->ndim, out_shape, q->dtype, args[13], want_lse, q->ndim == 4 ? 3 : -1,
                    lse_shape, &a[OUT], &a[LSE], &out, &lse, &lse_t))
        return ext_fail(a, N, out, lse);
    attn_status st;
    if (reference)
        EXT_CALL(st, attn_ref_forward((attn_layout)layout, q, &a[K].t, v, &p, &a[OUT].t, lse_t));
    else
        EXT_CALL(st, attn_forward((attn_ctx *)ctx, (attn_layout)layout, q, &a[K].t, v, &p, &a[OUT].t, lse_t));
    return ext_finish(st, reference ? "attn_ref_forward" : "attn_forward", a, N, out, lse, want_lse);
}

/* varlen(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, flash, softmax_scale, causal, window_size, softcap,
 *        alibi_slopes, sinks, out, lse, want_lse, reference)
 * Packed attention (attn_forward_varlen, or the oracle): q [total_q, num_heads, head_size], k/v [total_k,
 * num_kv_heads, head_size(_v)], cu_seqlens int32 [batch + 1]. out [total_q, num_heads, head_size_v]
 * (allocated if None: zero, and an allocated lse -inf, in rows past cu_seqlens_q[-1]); lse float32
 * [num_heads, total_q]. */
static PyObject *ext_varlen(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("varlen", 17);
    enum { Q, K, V, CQ, CK, OUT, LSE, AL, SI, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx = NULL;
    attn_params p;
    PyObject *out = NULL, *lse = NULL;
    attn_tensor *lse_t;
    int want_lse, reference;
    if (ext_begin(args, 15, 16, &want_lse, &reference, &ctx))
        return NULL;
    if (ext_tensor_n(args[1], 0, -1, "q", &a[Q]) || ext_tensor_n(args[2], 0, -1, "k", &a[K]) ||
        ext_tensor_n(args[3], 0, -1, "v", &a[V]) || ext_tensor_n(args[4], 0, ATTN_DTYPE_I32, "cu_seqlens_q", &a[CQ]) ||
        ext_tensor_n(args[5], 0, ATTN_DTYPE_I32, "cu_seqlens_k", &a[CK]) ||
        ext_options(&args[7], args[6] == Py_True, a[Q].t.ndim == 3 ? a[Q].t.shape[1] : -1, &a[AL], &p))
        return ext_fail(a, N, NULL, NULL);
    const attn_tensor *q = &a[Q].t, *v = &a[V].t, *cq = &a[CQ].t;
    int64_t out_shape[ATTN_MAX_DIMS];
    memcpy(out_shape, q->shape, sizeof out_shape);
    if (q->ndim == 3 && v->ndim >= 1)
        out_shape[2] = v->shape[v->ndim - 1];
    const int64_t lse_shape[2] = {q->ndim == 3 ? q->shape[1] : 0, q->shape[0]};
    if (ext_outputs(args[1], args[13], q->ndim, out_shape, q->dtype, args[14], want_lse, q->ndim == 3 ? 2 : -1,
                    lse_shape, &a[OUT], &a[LSE], &out, &lse, &lse_t))
        return ext_fail(a, N, out, lse);
    attn_status st;
    if (reference)
        EXT_CALL(st, attn_ref_forward_varlen(q, &a[K].t, v, cq, &a[CK].t, &p, &a[OUT].t, lse_t));
    else
        EXT_CALL(st, attn_forward_varlen((attn_ctx *)ctx, q, &a[K].t, v, cq, &a[CK].t, &p, &a[OUT].t, lse_t));
    return ext_finish(st, reference ? "attn_ref_forward_varlen" : "attn_forward_varlen", a, N, out, lse, want_lse);
}

/* kvcache(ctx, q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, softmax_scale, causal,
 *         window_size, softcap, alibi_slopes, sinks, out, want_lse, cache_leftpad, k_descale, v_descale)
 * flash_attn_with_kvcache (python/attn/flash.py; rotary embedding arrives applied to q and k) on
 * attn_forward_kvcache: k_cache / v_cache joined as ext_join (a copy, written back after an append, when their
 * strides differ); cache_seqlens an int or an int32 array; alibi_slopes [nheads] or [batch, nheads]; k_descale /
 * v_descale as ext_scale. Returns out [batch, seqlen_q, nheads, headdim_v] or (out, lse float32 [batch, nheads,
 * seqlen_q]). */
static PyObject *ext_kvcache(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("kvcache", 20);
    enum { Q, KC, VC, KN, VN, CS, BI, BT, LP, OUT, AL, SI, KS, VS, AB, LS, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx, *copy = NULL;
    attn_params p;
    PyObject *out = NULL, *lse = NULL, *ret = NULL;
    int want_lse, reference;
    if (ext_begin(args, 16, -1, &want_lse, &reference, &ctx))
        return NULL;
    const int append = args[4] != Py_None || args[5] != Py_None;
    attn_tensor kv, *kn, *vn, *cs = NULL, *bi, *bt, *lp, cs0;
    const attn_tensor *ab, *q = &a[Q].t;
    int32_t cs_all = 0;
    if (ext_tensor_n(args[1], 0, -1, "q", &a[Q]) || ext_tensor_n(args[2], append, -1, "k_cache", &a[KC]) ||
        ext_tensor_n(args[3], append, -1, "v_cache", &a[VC]) || ext_opt_tensor_n(args[4], 0, -1, "k", &a[KN], &kn) ||
        ext_opt_tensor_n(args[5], 0, -1, "v", &a[VN], &vn) ||
        ext_opt_tensor_n(args[7], 0, ATTN_DTYPE_I32, "cache_batch_idx", &a[BI], &bi) ||
        ext_opt_tensor_n(args[8], 0, ATTN_DTYPE_I32, "block_table", &a[BT], &bt) ||
        ext_opt_tensor_n(args[17], 0, ATTN_DTYPE_I32, "cache_leftpad", &a[LP], &lp))
        goto done;
    if (PyLong_Check(args[6])) { /* one length for every sequence */
        int over = 0;
        const long long v = PyLong_AsLongLongAndOverflow(args[6], &over);
        if (over || v < INT32_MIN || v > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "cache_seqlens=%R does not fit int32", args[6]);
            goto done;
        }
        cs_all = (int32_t)v;
        cs0 = attn_tensor_make(&cs_all, ATTN_DTYPE_I32, 0, NULL);
        cs = &cs0;
    } else if (ext_opt_tensor_n(args[6], 0, ATTN_DTYPE_I32, "cache_seqlens", &a[CS], &cs)) {
        goto done;
    }
    ab = args[13] != Py_None && ext_tensor(args[13], 0, ATTN_DTYPE_F32, &a[AB]) == 0 && a[AB].t.ndim == 2 ? &a[AB].t
                                                                                                          : NULL;
    PyErr_Clear(); /* (anything else is ext_options' to convert or refuse) */
    if (q->ndim != 4) {
        ext_bad_shape("q", q, "[batch, seqlen_q, nheads, headdim]");
        goto done;
    }
    PyObject *opt[6] = {args[9], args[10], args[11], args[12], ab ? Py_None : args[13], args[14]};
    if (ext_join(&a[KC].t, &a[VC].t, "k_cache", "v_cache", lp != NULL, &kv, &copy) ||
        ext_options(opt, 1, q->shape[2], &a[AL], &p) ||
        ext_scale(args[18], "k_descale", &kv, &a[KS], &p.k_scale, &p.k_scales) ||
        ext_scale(args[19], "v_descale", &kv, &a[VS], &p.v_scale, &p.v_scales))
        goto done;
    const int64_t out_shape[4] = {q->shape[0], q->shape[1], q->shape[2], kv.shape[4]};
    const int64_t lse_shape[3] = {q->shape[0], q->shape[2], q->shape[1]};
    if (args[15] != Py_None) {
        if (ext_tensor_n(args[15], 1, -1, "out", &a[OUT]))
            goto done;
        out = Py_NewRef(args[15]);
    } else if ((out = ext_alloc(args[1], 4, out_shape, q->dtype, &a[OUT])) == NULL) {
        goto done;
    }
    if (want_lse && (lse = ext_alloc(args[1], 3, lse_shape, ATTN_DTYPE_F32, &a[LS])) == NULL)
        goto done;
    /* out in a cache: a copied cache hides it from libattn, and its message names the caches as flash-attn does */
    for (int i = KC; i <= VC; i++)
        if (ext_spans_meet(&a[OUT].t, &a[i].t)) {
            ext_error(0, ATTN_STATUS_INVALID_ARGUMENT, "out: overlaps %s in memory", i == KC ? "k_cache" : "v_cache");
            goto done;
        }
    attn_status st;
    EXT_CALL(st, attn_forward_kvcache((attn_ctx *)ctx, q, &kv, kn, vn, cs, bi, lp, bt, ab, &p, &a[OUT].t,
                                      want_lse ? &a[LS].t : NULL));
    if (st != ATTN_STATUS_OK) {
        ext_raise(st, "attn_forward_kvcache");
        goto done;
    }
    if (copy && append) {
        ext_copy4(&a[KC].t, (char *)copy, 0);
        ext_copy4(&a[VC].t, (char *)copy + attn_dtype_size(kv.dtype) * (size_t)(kv.strides[0]), 0);
    }
    ret = ext_result(out, lse, want_lse);
    out = lse = NULL;
done:
    PyMem_Free(copy);
    ext_release_all(a, N);
    Py_XDECREF(out);
    Py_XDECREF(lse);
    return ret;
}

/* varlen_paged(ctx, q, k_cache, v_cache, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k, softmax_scale,
 *              causal, window_size, softcap, alibi_slopes, sinks, out, want_lse)
 * flash_attn_varlen_func(block_table=...): q [total_q, nheads, headdim]; k_cache/v_cache [num_blocks, block_size,
 * nheads_k, headdim] (as ext_join); cu_seqlens_q/k int32 [batch + 1]; block_table int32 [batch, max_blocks];
 * seqused_k int32 [batch] or None (then the differences of cu_seqlens_k). One attn_paged_attention; an
 * allocated out is zero (lse -inf) past cu_seqlens_q[-1]. Returns out or (out, lse float32 [nheads, total_q]). */
static PyObject *ext_varlen_paged(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("varlen_paged", 16);
    enum { Q, KC, VC, CQ, CK, BT, SU, OUT, LSE, AL, SI, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    void *ctx, *copy = NULL;
    int32_t *lens = NULL;
    attn_params p;
    PyObject *out = NULL, *lse = NULL, *ret = NULL;
    attn_tensor kv, *su, *lse_t, tsl;
    int want_lse, reference;
    if (ext_begin(args, 15, -1, &want_lse, &reference, &ctx))
        return NULL;
    if (ext_tensor_n(args[1], 0, -1, "q", &a[Q]) || ext_tensor_n(args[2], 0, -1, "k", &a[KC]) ||
        ext_tensor_n(args[3], 0, -1, "v", &a[VC]) || ext_tensor_n(args[4], 0, ATTN_DTYPE_I32, "cu_seqlens_q", &a[CQ]) ||
        ext_tensor_n(args[5], 0, ATTN_DTYPE_I32, "cu_seqlens_k", &a[CK]) ||
        ext_tensor_n(args[6], 0, ATTN_DTYPE_I32, "block_table", &a[BT]) ||
        ext_opt_tensor_n(args[7], 0, ATTN_DTYPE_I32, "seqused_k", &a[SU], &su) ||
        ext_join(&a[KC].t, &a[VC].t, "k", "v", 0, &kv, &copy))
        goto done;
    const attn_tensor *q = &a[Q].t, *cq = &a[CQ].t, *ck = &a[CK].t;
    if (q->ndim != 3 || cq->ndim != 1 || cq->shape[0] < 1) {
        ext_bad_shape(q->ndim != 3 ? "q" : "cu_seqlens_q", q->ndim != 3 ? q : cq,
                      q->ndim != 3 ? "[total_q, nheads, headdim]" : "[batch + 1]");
        goto done;
    }
    const int64_t batch = cq->shape[0] - 1, want[3] = {batch + 1, -1, -1}, want_bt[2] = {batch, -1};
    const int64_t out_shape[3] = {q->shape[0], q->shape[1], kv.shape[4]}, lse_shape[2] = {q->shape[1], q->shape[0]};
    if (ext_expect("cu_seqlens_k", ck, 1, want) || ext_expect("block_table", &a[BT].t, 2, want_bt) ||
        (su && ext_expect("seqused_k", su, 1, want_bt)) ||
        (args[14] != Py_None &&
         (ext_tensor_n(args[14], 1, -1, "out", &a[OUT]) || ext_expect("out", &a[OUT].t, 3, out_shape))))
        goto done;
    ext_arg_release(&a[OUT]);
    if (su != NULL) {
        tsl = *su;
    } else { /* the lengths from cu_seqlens_k, read here */
        if ((lens = PyMem_Malloc((size_t)batch * 4 + 4)) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (int64_t b = 0; b < batch; b++) {
            const int64_t n = (int64_t)EXT_I32_1(ck, b + 1) - EXT_I32_1(ck, b);
            if (n < 0) {
                PyErr_Format(PyExc_ValueError, "cu_seqlens_k: entry %lld = %d < entry %lld = %d", (long long)b + 1,
                             EXT_I32_1(ck, b + 1), (long long)b, EXT_I32_1(ck, b));
                goto done;
            }
            lens[b] = (int32_t)n;
        }
        tsl = attn_tensor_make(lens, ATTN_DTYPE_I32, 1, &batch);
    }
    if (ext_options(&args[8], 1, q->shape[1], &a[AL], &p) ||
        ext_outputs(args[1], args[14], 3, out_shape, q->dtype, Py_None, want_lse, 2, lse_shape, &a[OUT], &a[LSE], &out,
                    &lse, &lse_t))
        goto done;
    attn_status st;
    EXT_CALL(st, attn_paged_attention((attn_ctx *)ctx, q, &kv, cq, &tsl, &a[BT].t, &p, &a[OUT].t, lse_t));
    if (st != ATTN_STATUS_OK) {
        ext_raise(st, "attn_paged_attention");
        goto done;
    }
    ret = ext_result(out, lse, want_lse);
    out = lse = NULL;
done:
    PyMem_Free(lens);
    PyMem_Free(copy);
    ext_release_all(a, N);
    Py_XDECREF(out);
    Py_XDECREF(lse);
    return ret;
}

/* ================================================================================================
 * Every other entry: one table-driven converter per argument kind, one status -> exception helper
 * ================================================================================================ */

/* Python helpers handed over by _init: as_view(obj, name, writable) -> ndarray (lists, detached torch
 * tensors, retagged caches; raises the family's error naming the argument) and refuse(array, name,
 * writable), which raises the error that explains why a view cannot be taken (dtype, strides, read-only). */
/* The n-th space-separated word of `names` into buf (argument names for messages). */
static const char *ext_word(const char *names, int n, char *buf, size_t cap) {
    while (n-- > 0 && (names = strchr(names, ' ')) != NULL)
        names++;
    if (names == NULL)
        return "?";
    size_t len = strcspn(names, " ");
    if (len >= cap)
        len = cap - 1;
    memcpy(buf, names, len);
    buf[len] = '\0';
    return buf;
}

/* One argument of a generic call. */
typedef struct ext_slot {
    ext_arg a;   /* tensors                                            */
    Py_buffer b; /* raw buffers ('b' / 'B')                              */
    int has_b;
    attn_tensor *t; /* the tensor argument, NULL for None                   */
    int64_t i;      /* integers; buffer size in bytes                       */
    double f;
    void *p; /* handles, buffer addresses                            */
} ext_slot;

#define EXT_MAX_SLOTS 14
typedef struct ext_call {
    ext_slot s[EXT_MAX_SLOTS];
    int n;
    attn_params params;
    ext_arg opt[5]; /* alibi_slopes, sinks, mask, key_padding_mask, additive_mask */
    attn_quant_params qp;
} ext_call;

static void ext_slot_release(ext_slot *s) {
    ext_arg_release(&s->a);
    if (s->has_b)
        PyBuffer_Release(&s->b);
    s->has_b = 0;
}

static void ext_call_release(ext_call *c) {
    for (int i = 0; i < c->n; i++)
        ext_slot_release(&c->s[i]);
    ext_release_all(c->opt, 5);
}

/* Any array argument -> view in s->a, or the family's exception naming it. Returns 0 or -1. */
static int ext_conv_tensor(PyObject *obj, int writable, const char *name, ext_slot *s) {
    if (ext_tensor_n(obj, writable, -1, name, &s->a) != 0)
        return -1;
    s->t = &s->a.t;
    return 0;
}

/* A raw buffer (workspaces, codec arrays): None -> NULL / 0. */
static int ext_conv_buffer(PyObject *obj, int writable, const char *name, ext_slot *s) {
    if (obj == Py_None) {
        s->p = NULL;
        s->i = 0;
        return 0;
    }
    if (PyObject_GetBuffer(obj, &s->b, writable ? PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS : PyBUF_ANY_CONTIGUOUS) != 0)
        return -1;
    s->has_b = 1;
    s->p = s->b.buf;
    s->i = s->b.len;
    return 0;
}

static int ext_conv_int(PyObject *obj, const char *fn, const char *name, int64_t lo, int64_t hi, int64_t *out) {
    PyObject *ix = PyNumber_Index(obj);
    if (ix == NULL)
        return -1;
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(ix, &overflow);
    Py_DECREF(ix);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < lo || v > hi) {
        PyErr_Format(PyExc_OverflowError, "%s: %s is outside [%lld, %lld]", fn, name, (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int ext_handle_of(PyObject *obj, const char *what, void **out) {
    *out = PyLong_Check(obj) ? PyLong_AsVoidPtr(obj) : NULL;
    if (*out == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "attn %s is %s", what, strcmp(what, "Plan") ? "closed" : "freed");
        return -1;
    }
    return 0;
}

/* q's heads in a generic call parsed up to slot n (the slots named "q" and "layout"): dim 1 (BNSD) or 2 of a
 * 4-D q, else -1. */
static int64_t ext_heads(const ext_call *c, const char *names, int n) {
    int64_t layout = ATTN_LAYOUT_BSND;
    const attn_tensor *q = NULL;
    char nb[64];
    for (int k = 0; k < n; k++) {
        const char *w = ext_word(names, k, nb, sizeof nb);
        if (!strcmp(w, "layout"))
            layout = c->s[k].i;
        else if (!strcmp(w, "q"))
            q = c->s[k].t;
    }
    return q != NULL && q->ndim == 4 ? q->shape[layout == ATTN_LAYOUT_BNSD ? 1 : 2] : -1;
}

/* The options of a diffusion entry, (softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, mask,
 * key_padding_mask, additive_mask), as the dense entry reads them (ext_options, ext_masks) into c->params. */
static int ext_conv_options(PyObject *obj, ext_call *c, int64_t num_heads) {
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 9) {
        PyErr_SetString(PyExc_TypeError, "options: expected the 9-tuple of attn.diffusion._options");
        return -1;
    }
    PyObject *const *v = &PyTuple_GET_ITEM(obj, 0);
    return ext_options(v, 0, num_heads, c->opt, &c->params) || ext_masks(&v[6], &c->opt[2], &c->params) ? -1 : 0;
}

/* Converts args by `kinds` (one letter per argument; names: their space-separated names for messages):
 *   c ctx handle   h plan handle   i int64   u uint32   f float   T tensor   W writable tensor
 *   t / w optional (None = NULL)   P options (ext_conv_options; c->params)   b / B read / writable buffer (None = NULL)
 *   Q quant params (format, rotate, rotation_seed, q_block_rows, kv_block_rows) (c->qp)   O any object */
static int ext_parse(const char *fn, const char *kinds, const char *names, PyObject *const *args, Py_ssize_t nargs,
                     ext_call *c) {
    memset(c, 0, sizeof *c);
    c->params = g_params_default;
    const Py_ssize_t want = (Py_ssize_t)strlen(kinds);
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "attn._ext.%s takes %zd arguments (%zd given)", fn, want, nargs);
        return -1;
    }
    char nb[64];
    for (int k = 0; k < want; k++) {
        ext_slot *s = &c->s[k];
        PyObject *o = args[k];
        c->n = k + 1;
        int r = 0;
        switch (kinds[k]) {
        case 'c':
            r = ext_handle_of(o, "Context", &s->p);
            break;
        case 'h':
            r = ext_handle_of(o, "Plan", &s->p);
            break;
        case 'i':
            r = ext_conv_int(o, fn, ext_word(names, k, nb, sizeof nb), INT64_MIN, INT64_MAX, &s->i);
            break;
        case 'u':
            r = ext_conv_int(o, fn, ext_word(names, k, nb, sizeof nb), 0, UINT32_MAX, &s->i);
            break;
        case 'f': { /* a float32 argument: its range checked here (ext_float), the double kept */
            float f32 = 0.0f;
            r = ext_float(o, ext_word(names, k, nb, sizeof nb), &f32);
            s->f = f32;
            break;
        }
        case 't':
        case 'w':
            if (o == Py_None)
                break;
            /* fall through */
        case 'T':
        case 'W':
            r = ext_conv_tensor(o, kinds[k] == 'W' || kinds[k] == 'w', ext_word(names, k, nb, sizeof nb), s);
            break;
        case 'P':
            r = ext_conv_options(o, c, ext_heads(c, names, k));
            break;
        case 'b':
        case 'B':
            r = ext_conv_buffer(o, kinds[k] == 'B', ext_word(names, k, nb, sizeof nb), s);
            break;
        case 'Q': { /* None keeps attn_quant_params_init's value */
            if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 5) {
                PyErr_SetString(PyExc_TypeError, "quant params: expected a 5-tuple");
                return -1;
            }
            static const char *const fields[5] = {"format", "rotate", "rotation_seed", "q_block_rows", "kv_block_rows"};
            int64_t q[5];
            for (int j = 0; j < 5 && r == 0; j++) {
                PyObject *x = PyTuple_GET_ITEM(o, j);
                q[j] = -1;
                if (j > 0 && x == Py_None)
                    continue;
                r = ext_conv_int(x, fn, fields[j], j == 2 ? 0 : INT32_MIN, j == 2 ? UINT32_MAX : INT32_MAX, &q[j]);
            }
            if (r != 0)
                break;
            attn_quant_params_init_sized(&c->qp, sizeof c->qp, (attn_quant_format)q[0]);
            PyObject *const *qv = &PyTuple_GET_ITEM(o, 0);
            if (qv[1] != Py_None)
                c->qp.rotate = (int32_t)q[1];
            if (qv[2] != Py_None)
                c->qp.rotation_seed = (uint32_t)q[2];
            if (qv[3] != Py_None)
                c->qp.q_block_rows = (int32_t)q[3];
            if (qv[4] != Py_None)
                c->qp.kv_block_rows = (int32_t)q[4];
            break;
        }
        default:
            break;
        }
        if (r != 0)
            return -1;
    }
    return 0;
}

/* The AttnError subclass of a non-OK status with this thread's attn_last_error() (ext_raise). */
static PyObject *ext_status(attn_status st, const char *fn) {
    if (st == ATTN_STATUS_OK)
        Py_RETURN_NONE;
    return ext_raise(st, fn);
}

#define C_CTX(k) ((attn_ctx *)c.s[k].p)
#define C_T(k)   (c.s[k].t)
#define C_I(k)   (c.s[k].i)
#define C_F(k)   ((float)c.s[k].f)
#define C_P(k)   (c.s[k].p)

/* One generic entry: parse by kinds, call with the GIL released, raise from the status. */
#define EXT_ENTRY(fn, kinds, names, expr)                                                                              \
    static PyObject *py_##fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {                                \
        ext_call c;                                                                                                    \
        if (ext_parse(#fn, kinds, names, args, nargs, &c) != 0) {                                                      \
            ext_call_release(&c);                                                                                      \
            return NULL;                                                                                               \
        }                                                                                                              \
        attn_status st;                                                                                                \
        EXT_CALL(st, (expr));                                                                                          \
        ext_call_release(&c);                                                                                          \
        return ext_status(st, #fn);                                                                                    \
    }

#define PRM (&c.params)
/* serving (attention, cache writes and merge are the hot entries above, which also take the oracle) */
EXT_ENTRY(attn_copy_blocks, "cWT", "ctx kv_cache block_mapping", attn_copy_blocks(C_CTX(0), C_T(1), C_T(2)))
EXT_ENTRY(attn_swap_blocks, "cTWT", "ctx src_cache dst_cache block_mapping",
          attn_swap_blocks(C_CTX(0), C_T(1), C_T(2), C_T(3)))
EXT_ENTRY(attn_swap_blocks_bytes, "cTWiT", "ctx src dst block_size_in_bytes block_mapping",
          attn_swap_blocks_bytes(C_CTX(0), C_T(1), C_T(2), C_I(3), C_T(4)))
EXT_ENTRY(attn_merge_attn_states_ex, "cTTTTifWw", "ctx out_a lse_a out_b lse_b merge_tokens output_scale out lse_out",
          attn_merge_attn_states_ex(C_CTX(0), C_T(1), C_T(2), C_T(3), C_T(4), C_I(5), C_F(6), C_T(7), C_T(8)))
/* diffusion */
EXT_ENTRY(attn_forward_padded, "ciTTTTPWwBi", "ctx layout q k v kv_mask params out lse workspace workspace_size",
          attn_forward_padded(C_CTX(0), (attn_layout)C_I(1), C_T(2), C_T(3), C_T(4), C_T(5), PRM, C_T(7), C_T(8),
                              C_P(9), (size_t)C_I(10)))
EXT_ENTRY(attn_ref_forward_padded, "iTTTTPWwBi", "layout q k v kv_mask params out lse workspace workspace_size",
          attn_ref_forward_padded((attn_layout)C_I(0), C_T(1), C_T(2), C_T(3), C_T(4), PRM, C_T(6), C_T(7), C_P(8),
                                  (size_t)C_I(9)))
EXT_ENTRY(attn_forward_packed, "cTTTTTPWw", "ctx q k v cu_seqlens_q cu_seqlens_k params out lse",
          attn_forward_packed(C_CTX(0), C_T(1), C_T(2), C_T(3), C_T(4), C_T(5), PRM, C_T(7), C_T(8)))
EXT_ENTRY(attn_forward_piecewise, "ciTTTbibiPWw",
          "ctx layout q k v spans num_spans query_ranges num_query_ranges params out lse",
          attn_forward_piecewise(C_CTX(0), (attn_layout)C_I(1), C_T(2), C_T(3), C_T(4), C_P(5), C_I(6), C_P(7), C_I(8),
                                 PRM, C_T(10), C_T(11)))
EXT_ENTRY(attn_ref_forward_piecewise, "iTTTbibiPWw",
          "layout q k v spans num_spans query_ranges num_query_ranges params out lse",
          attn_ref_forward_piecewise((attn_layout)C_I(0), C_T(1), C_T(2), C_T(3), C_P(4), C_I(5), C_P(6), C_I(7), PRM,
                                     C_T(9), C_T(10)))
EXT_ENTRY(attn_forward_paged_piecewise, "cTTTTbibiPWw",
          "ctx q kv_cache seq_lens block_table spans num_spans query_ranges num_query_ranges params out lse",
          attn_forward_paged_piecewise(C_CTX(0), C_T(1), C_T(2), C_T(3), C_T(4), C_P(5), C_I(6), C_P(7), C_I(8), PRM,
                                       C_T(10), C_T(11)))
EXT_ENTRY(attn_ref_forward_paged_piecewise, "TTTTbibiPWw",
          "q kv_cache seq_lens block_table spans num_spans query_ranges num_query_ranges params out lse",
          attn_ref_forward_paged_piecewise(C_T(0), C_T(1), C_T(2), C_T(3), C_P(4), C_I(5), C_P(6), C_I(7), PRM, C_T(9),
                                           C_T(10)))
EXT_ENTRY(attn_forward_kv_prefix, "ciTTTiPWw", "ctx layout q k v valid_kv_length params out lse",
          attn_forward_kv_prefix(C_CTX(0), (attn_layout)C_I(1), C_T(2), C_T(3), C_T(4), C_I(5), PRM, C_T(7), C_T(8)))
EXT_ENTRY(attn_forward_prescaled, "ciTTTiPWwBi",
          "ctx layout q k v input_scale_log2 params out lse workspace workspace_size",
          attn_forward_prescaled(C_CTX(0), (attn_layout)C_I(1), C_T(2), C_T(3), C_T(4), (int32_t)C_I(5), PRM, C_T(7),
                                 C_T(8), C_P(9), (size_t)C_I(10)))
EXT_ENTRY(attn_forward_quant, "ciTTTQPWwBi", "ctx layout q k v quant params out lse workspace workspace_size",
          attn_forward_quant(C_CTX(0), (attn_layout)C_I(1), C_T(2), C_T(3), C_T(4), &c.qp, PRM, C_T(7), C_T(8), C_P(9),
                             (size_t)C_I(10)))
EXT_ENTRY(attn_ref_forward_quant, "iTTTQPWw", "layout q k v quant params out lse",
          attn_ref_forward_quant((attn_layout)C_I(0), C_T(1), C_T(2), C_T(3), &c.qp, PRM, C_T(6), C_T(7)))
/* codecs (raw contiguous buffers) */
EXT_ENTRY(attn_quantize_fp8, "ibifB", "format src n scale dst",
          attn_quantize_fp8((attn_dtype)C_I(0), C_P(1), C_I(2), C_F(3), C_P(4)))
EXT_ENTRY(attn_dequantize_fp8, "ibifB", "format src n scale dst",
          attn_dequantize_fp8((attn_dtype)C_I(0), C_P(1), C_I(2), C_F(3), C_P(4)))
EXT_ENTRY(attn_quantize_mx, "ibiBB", "format src n elements scales",
          attn_quantize_mx((attn_dtype)C_I(0), C_P(1), C_I(2), C_P(3), C_P(4)))
EXT_ENTRY(attn_dequantize_mx, "ibbiB", "format elements scales n dst",
          attn_dequantize_mx((attn_dtype)C_I(0), C_P(1), C_P(2), C_I(3), C_P(4)))
EXT_ENTRY(attn_hadamard_signs, "iuB", "head_size seed signs", attn_hadamard_signs(C_I(0), (uint32_t)C_I(1), C_P(2)))
EXT_ENTRY(attn_hadamard_rotate, "biiuB", "src num_rows head_size seed dst",
          attn_hadamard_rotate(C_P(0), C_I(1), C_I(2), (uint32_t)C_I(3), C_P(4)))
/* handles */
EXT_ENTRY(attn_ctx_set_num_threads, "ci", "ctx num_threads", attn_ctx_set_num_threads(C_CTX(0), (int32_t)C_I(1)))

/* Entries that return a value rather than a status. */
#define EXT_VALUE(fn, kinds, names, type, expr, conv)                                                                  \
    static PyObject *py_##fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {                                \
        ext_call c;                                                                                                    \
        if (ext_parse(#fn, kinds, names, args, nargs, &c) != 0) {                                                      \
            ext_call_release(&c);                                                                                      \
            return NULL;                                                                                               \
        }                                                                                                              \
        type v = (expr);                                                                                               \
        ext_call_release(&c);                                                                                          \
        return conv(v);                                                                                                \
    }
static PyObject *ext_str(const char *s) {
    if (s == NULL)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}
EXT_VALUE(attn_version_number, "", "", unsigned, attn_version_number(), PyLong_FromUnsignedLong)
EXT_VALUE(attn_version_string, "", "", const char *, attn_version_string(), ext_str)
EXT_VALUE(attn_status_string, "i", "status", const char *, attn_status_string((attn_status)C_I(0)), ext_str)
EXT_VALUE(attn_last_error, "", "", const char *, attn_last_error(), ext_str)
EXT_VALUE(attn_dtype_size, "i", "dtype", size_t, attn_dtype_size((attn_dtype)C_I(0)), PyLong_FromSize_t)
EXT_VALUE(attn_dtype_name, "i", "dtype", const char *, attn_dtype_name((attn_dtype)C_I(0)), ext_str)
EXT_VALUE(attn_isa_count, "", "", long, attn_isa_count(), PyLong_FromLong)
EXT_VALUE(attn_isa_name, "i", "index", const char *, attn_isa_name((int32_t)C_I(0)), ext_str)
EXT_VALUE(attn_isa_opt_in_name, "i", "index", const char *, attn_isa_opt_in_name((int32_t)C_I(0)), ext_str)
EXT_VALUE(attn_cpu_features, "", "", const char *, attn_cpu_features(), ext_str)
EXT_VALUE(attn_ctx_num_threads, "c", "ctx", long, attn_ctx_num_threads(C_CTX(0)), PyLong_FromLong)
EXT_VALUE(attn_ctx_isa, "c", "ctx", const char *, attn_ctx_isa(C_CTX(0)), ext_str)
EXT_VALUE(attn_forward_quant_kernels, "c", "ctx", const char *, attn_forward_quant_kernels(C_CTX(0)), ext_str)
EXT_VALUE(attn_plan_workspace_size, "h", "plan", size_t, attn_plan_workspace_size((const attn_plan *)C_P(0)),
          PyLong_FromSize_t)
EXT_VALUE(attn_fp8_from_float, "if", "format x", long, attn_fp8_from_float((attn_dtype)C_I(0), C_F(1)), PyLong_FromLong)
EXT_VALUE(attn_fp8_to_float, "ii", "format bits", double, attn_fp8_to_float((attn_dtype)C_I(0), (uint8_t)C_I(1)),
          PyFloat_FromDouble)
EXT_VALUE(attn_fp4_e2m1_from_float, "f", "x", long, attn_fp4_e2m1_from_float(C_F(0)), PyLong_FromLong)
EXT_VALUE(attn_fp4_e2m1_to_float, "i", "nibble", double, attn_fp4_e2m1_to_float((uint8_t)C_I(0)), PyFloat_FromDouble)
EXT_VALUE(attn_e8m0_to_float, "i", "bits", double, attn_e8m0_to_float((uint8_t)C_I(0)), PyFloat_FromDouble)

/* attn_kv_cache_to_huge_pages(cache): the bytes released to refault as huge pages (int). */
static PyObject *py_attn_kv_cache_to_huge_pages(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    ext_call c;
    if (ext_parse("attn_kv_cache_to_huge_pages", "W", "cache", args, nargs, &c) != 0) {
        ext_call_release(&c);
        return NULL;
    }
    int64_t released = 0;
    attn_status st;
    EXT_CALL(st, attn_kv_cache_to_huge_pages(C_T(0), &released));
    ext_call_release(&c);
    return st == ATTN_STATUS_OK ? PyLong_FromLongLong((long long)released)
                                : ext_status(st, "attn_kv_cache_to_huge_pages");
}

static PyObject *py_attn_clear_error(PyObject *self, PyObject *unused) {
    attn_clear_error();
    Py_RETURN_NONE;
}

static PyObject *py_attn_isa_available(PyObject *self, PyObject *arg) {
    const char *s = PyUnicode_AsUTF8(arg);
    return s ? PyBool_FromLong(attn_isa_available(s)) : NULL;
}

static PyObject *py_attn_ctx_set_isa(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *ctx;
    if (nargs != 2 || ext_handle_of(args[0], "Context", &ctx))
        return nargs != 2 ? PyErr_Format(PyExc_TypeError, "attn_ctx_set_isa(ctx, name)") : NULL;
    const char *s = PyUnicode_AsUTF8(args[1]);
    if (s == NULL)
        return NULL;
    attn_clear_error();
    return ext_status(attn_ctx_set_isa((attn_ctx *)ctx, s), "attn_ctx_set_isa");
}

static PyObject *py_attn_ctx_create(PyObject *self, PyObject *unused) {
    attn_ctx *ctx = NULL;
    attn_clear_error();
    const attn_status st = attn_ctx_create(&ctx);
    if (st != ATTN_STATUS_OK)
        return ext_raise(st, "attn_ctx_create");
    return PyLong_FromVoidPtr(ctx);
}

static PyObject *py_attn_ctx_destroy(PyObject *self, PyObject *arg) {
    void *ctx;
    if (ext_handle_of(arg, "Context", &ctx))
        return NULL;
    attn_ctx_destroy((attn_ctx *)ctx);
    Py_RETURN_NONE;
}

static PyObject *py_attn_plan_free(PyObject *self, PyObject *arg) {
    void *plan;
    if (ext_handle_of(arg, "Plan", &plan))
        return NULL;
    attn_plan_free((attn_plan *)plan);
    Py_RETURN_NONE;
}

/* Workspace-size entries: parse by kinds, `expr` writes size_t n; the size, or the status raised. */
#define EXT_SIZE(fn, kinds, names, expr)                                                                               \
    static PyObject *py_##fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {                                \
        ext_call c;                                                                                                    \
        size_t n = 0;                                                                                                  \
        if (ext_parse(#fn, kinds, names, args, nargs, &c) != 0) {                                                      \
            ext_call_release(&c);                                                                                      \
            return NULL;                                                                                               \
        }                                                                                                              \
        attn_clear_error();                                                                                            \
        const attn_status st = (expr);                                                                                 \
        ext_call_release(&c);                                                                                          \
        return st ? ext_raise(st, #fn) : PyLong_FromSize_t(n);                                                         \
    }
EXT_SIZE(attn_forward_padded_workspace_size, "ii", "batch seq_len",
         attn_forward_padded_workspace_size(C_I(0), C_I(1), &n))
EXT_SIZE(attn_forward_prescaled_workspace_size, "TTT", "q k v",
         attn_forward_prescaled_workspace_size(C_T(0), C_T(1), C_T(2), &n))
EXT_SIZE(attn_forward_quant_workspace_size, "iTTT", "layout q k v",
         attn_forward_quant_workspace_size((attn_layout)C_I(0), C_T(1), C_T(2), C_T(3), &n))

/* attn_capabilities_get -> tuple of its 13 fields in declaration order */
static PyObject *py_attn_capabilities_get(PyObject *self, PyObject *unused) {
    attn_capabilities k;
    attn_clear_error();
    const attn_status st = attn_capabilities_get(&k, sizeof k);
    if (st != ATTN_STATUS_OK)
        return ext_raise(st, "attn_capabilities_get");
    return Py_BuildValue("(iiIIiiIiiiiii)", k.head_size_min, k.head_size_max, k.dtypes, k.kv_cache_dtypes,
                         k.block_size_min, k.block_size_max, k.request_kinds, k.sliding_window, k.softcap, k.alibi,
                         k.sinks, k.lse, k.max_decode_threshold);
}

/* The 9-tuple of attn.ops._plan_config -> *cfg (attn_plan_config's int fields in declaration order). 0, or -1 with an
 * exception set. */
static int ext_plan_config(PyObject *cf, const char *fn, attn_plan_config *cfg) {
    attn_plan_config_init_sized(cfg, sizeof *cfg);
    int32_t *fields[9] = {&cfg->num_blocks,
                          &cfg->block_size,
                          &cfg->num_heads,
                          &cfg->num_kv_heads,
                          &cfg->head_size,
                          &cfg->max_blocks_per_req,
                          &cfg->num_speculative_tokens,
                          &cfg->chunked_prefill_enabled,
                          &cfg->spec_method_mtp};
    static const char *fnames[9] = {"num_blocks",
                                    "block_size",
                                    "num_heads",
                                    "num_kv_heads",
                                    "head_size",
                                    "max_blocks_per_req",
                                    "num_speculative_tokens",
                                    "chunked_prefill_enabled",
                                    "spec_method_mtp"};
    if (!PyTuple_Check(cf) || PyTuple_GET_SIZE(cf) != 9) {
        PyErr_Format(PyExc_TypeError, "%s: config must be a 9-tuple", fn);
        return -1;
    }
    for (int i = 0; i < 9; i++) {
        int64_t v;
        if (ext_conv_int(PyTuple_GET_ITEM(cf, i), fn, fnames[i], INT32_MIN, INT32_MAX, &v))
            return -1;
        *fields[i] = (int32_t)v;
    }
    return 0;
}

/* A new plan's handle and counts: (handle, num_reqs, num_tokens, num_decodes, num_decode_tokens, num_prefills,
 * num_prefill_tokens, attn_state, workspace_size, identity_order) with identity_order True when every plan row
 * is its input row (token_src[t] == t). The plan's arrays come from attn_plan_get_info when asked for. */
static PyObject *ext_plan_result(attn_status st, attn_plan *plan) {
    attn_plan_info i;
    if (st == ATTN_STATUS_OK)
        st = attn_plan_get_info(plan, &i);
    if (st != ATTN_STATUS_OK) {
        attn_plan_free(plan);
        return ext_raise(st, "attn_plan_create");
    }
    int identity = 1;
    for (int64_t t = 0; identity && t < i.num_tokens; t++)
        identity = i.token_src[t] == t;
    return Py_BuildValue("(NLLLLLLinO)", PyLong_FromVoidPtr(plan), (long long)i.num_reqs, (long long)i.num_tokens,
                         (long long)i.num_decodes, (long long)i.num_decode_tokens, (long long)i.num_prefills,
                         (long long)i.num_prefill_tokens, (int)i.attn_state, (Py_ssize_t)i.workspace_size,
                         identity ? Py_True : Py_False);
}

/* attn_plan_create(config, requests, num_requests) -> ext_plan_result's tuple. config: the 9-tuple of
 * attn.ops._plan_config; requests: a buffer of num_requests attn_request records (REQUEST_LAYOUT). */
static PyObject *py_attn_plan_create(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    ext_call c;
    attn_plan_config cfg;
    if (ext_parse("attn_plan_create", "Obi", "config requests num_requests", args, nargs, &c) != 0 ||
        ext_plan_config(args[0], "attn_plan_create", &cfg) != 0) {
        ext_call_release(&c);
        return NULL;
    }
    if (C_I(2) < 0 || (size_t)c.s[1].i < (size_t)C_I(2) * sizeof(attn_request)) {
        ext_call_release(&c);
        PyErr_SetString(PyExc_ValueError, "attn_plan_create: requests buffer shorter than num_requests records");
        return NULL;
    }
    attn_plan *plan = NULL;
    attn_status st;
    EXT_CALL(st, attn_plan_create(&cfg, (const attn_request *)C_P(1), C_I(2), &plan));
    ext_call_release(&c);
    return ext_plan_result(st, plan);
}

/* plan_step(config, kind, query_start_loc, seq_lens, block_table, num_reqs) -> ext_plan_result's tuple: the plan
 * of an engine step given as vLLM's metadata builder sees it (attn.vllm.backend), without a Python object or
 * NumPy pass per request. query_start_loc int32 [>= num_reqs + 1], seq_lens int32 [>= num_reqs] (keys of
 * each request after this step), block_table int32 [>= num_reqs, width] (torch tensors or NumPy arrays).
 * Request r schedules q = query_start_loc[r + 1] - query_start_loc[r] tokens over seq_lens[r] keys: a decoder
 * request has seq_lens[r] - q cached, a cross request seq_lens[r] encoder keys, an encoder-only request no cache
 * (its row is not read); its blocks are the first min(ceil(seq_lens[r] / block_size), width) of its row.
 * config's max_blocks_per_req is taken as the table's width (at least 1), and its num_blocks raised to the
 * largest block id used + 1 where it is smaller (an engine that has not bound its cache yet); libattn checks
 * everything else (its messages name requests[r] and the field). */
static PyObject *py_plan_step(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("plan_step", 6);
    enum { QSL, SL, BT, N };
    ext_arg a[N];
    memset(a, 0, sizeof a);
    attn_plan_config cfg;
    int64_t kind, n;
    attn_request *reqs = NULL;
    int32_t *rows = NULL;
    PyObject *ret = NULL;
    if (ext_plan_config(args[0], "plan_step", &cfg) || ext_conv_int(args[1], "plan_step", "kind", 0, 2, &kind) ||
        ext_conv_int(args[5], "plan_step", "num_reqs", 0, INT32_MAX, &n) ||
        ext_tensor_n(args[2], 0, ATTN_DTYPE_I32, "query_start_loc", &a[QSL]) ||
        ext_tensor_n(args[3], 0, ATTN_DTYPE_I32, "seq_lens", &a[SL]) ||
        ext_tensor_n(args[4], 0, ATTN_DTYPE_I32, "block_table", &a[BT]))
        goto done;
    const attn_tensor *qsl = &a[QSL].t, *sl = &a[SL].t, *bt = &a[BT].t;
    const int64_t want1[1] = {-1}, want2[2] = {-1, -1};
    if (ext_expect("query_start_loc", qsl, 1, want1) || ext_expect("seq_lens", sl, 1, want1) ||
        ext_expect("block_table", bt, 2, want2))
        goto done;
    if (qsl->shape[0] < n + 1 || sl->shape[0] < n || bt->shape[0] < n) {
        PyErr_Format(PyExc_ValueError,
                     "plan_step: num_reqs=%lld exceeds query_start_loc [%lld], seq_lens [%lld] or "
                     "block_table [%lld, ...]",
                     (long long)n, (long long)qsl->shape[0], (long long)sl->shape[0], (long long)bt->shape[0]);
        goto done;
    }
    const int64_t width = bt->shape[1], bs = cfg.block_size > 0 ? cfg.block_size : 1;
    cfg.max_blocks_per_req = width > 1 ? (width < INT32_MAX ? (int32_t)width : INT32_MAX) : 1;
    /* a request reads at most ceil(INT32_MAX / block_size) ids: the copy of a strided table holds that many a row */
    const int64_t cap = width < INT32_MAX / bs + 1 ? width : INT32_MAX / bs + 1;
    size_t bytes = 0;
    if ((reqs = PyMem_Calloc((size_t)n + 1, sizeof *reqs)) == NULL ||
        (n > 0 && width > 1 && bt->strides[1] != 1 &&
         (__builtin_mul_overflow((size_t)n, (size_t)cap * sizeof *rows, &bytes) ||
          (rows = PyMem_Malloc(bytes)) == NULL))) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t used_max = -1;
    for (int64_t r = 0; r < n; r++) {
        attn_request *q = &reqs[r];
        const int64_t len = EXT_I32_1(sl, r);
        q->num_scheduled_tokens = (int64_t)EXT_I32_1(qsl, r + 1) - EXT_I32_1(qsl, r);
        q->kind = (int32_t)kind;
        if (kind == ATTN_REQUEST_ENCODER_ONLY)
            continue;
        q->num_computed_tokens = kind == ATTN_REQUEST_CROSS ? 0 : len - q->num_scheduled_tokens;
        q->encoder_len = kind == ATTN_REQUEST_CROSS ? len : 0;
        const int64_t need = len > 0 ? (len - 1) / bs + 1 : 0;
        q->num_block_ids = need < width ? need : width;
        const int32_t *row = (const int32_t *)bt->data + r * bt->strides[0];
        q->block_ids = rows ? rows + r * cap : row; /* rows: a copy of a table whose rows are strided */
        for (int64_t j = 0; j < q->num_block_ids; j++) {
            const int32_t id = row[j * bt->strides[1]];
            if (rows)
                rows[r * cap + j] = id;
            used_max = id > used_max ? id : used_max;
        }
    }
    if (kind != ATTN_REQUEST_ENCODER_ONLY && cfg.num_blocks >= 0 && cfg.num_blocks <= used_max) /* (< 0: refused) */
        cfg.num_blocks = (int32_t)(used_max < INT32_MAX ? used_max + 1 : INT32_MAX);
    attn_plan *plan = NULL;
    attn_clear_error(); /* (the GIL is kept: a few µs of planning, and a thread that took it would be waited for) */
    const attn_status st = attn_plan_create(&cfg, reqs, n, &plan);
    ret = ext_plan_result(st, plan);
done:
    PyMem_Free(reqs);
    PyMem_Free(rows);
    ext_release_all(a, N);
    return ret;
}

/* attn_plan_get_info -> dict: the counts as ints, the arrays as bytearray copies */
static PyObject *py_attn_plan_get_info(PyObject *self, PyObject *arg) {
    void *plan;
    if (ext_handle_of(arg, "Plan", &plan))
        return NULL;
    attn_plan_info i;
    attn_clear_error();
    const attn_status st = attn_plan_get_info((const attn_plan *)plan, &i);
    if (st != ATTN_STATUS_OK)
        return ext_raise(st, "attn_plan_get_info");
#define EXT_BYTES(p, n) PyByteArray_FromStringAndSize((const char *)(p), (p) ? (Py_ssize_t)(n) : 0)
    const int64_t nr = i.num_reqs, nt = i.num_tokens;
    return Py_BuildValue(
        "{sLsLsLsLsLsLsisisLsLsLsLsLsnsNsNsNsNsNsNsN}", "num_reqs", (long long)nr, "num_tokens", (long long)nt,
        "num_decodes", (long long)i.num_decodes, "num_decode_tokens", (long long)i.num_decode_tokens, "num_prefills",
        (long long)i.num_prefills, "num_prefill_tokens", (long long)i.num_prefill_tokens, "attn_state", i.attn_state,
        "decode_threshold", i.decode_threshold, "max_query_len", (long long)i.max_query_len, "max_seq_len",
        (long long)i.max_seq_len, "max_blocks_per_req", (long long)i.max_blocks_per_req, "num_work_blocks",
        (long long)i.num_work_blocks, "num_split_items", (long long)i.num_split_items, "workspace_size",
        (Py_ssize_t)i.workspace_size, "query_start_loc", EXT_BYTES(i.query_start_loc, (nr + 1) * 4), "seq_lens",
        EXT_BYTES(i.seq_lens, nr * 4), "slot_mapping", EXT_BYTES(i.slot_mapping, nt * 8), "block_table",
        EXT_BYTES(i.block_table, nr * i.max_blocks_per_req * 4), "kinds", EXT_BYTES(i.kinds, nr * 4), "req_order",
        EXT_BYTES(i.req_order, nr * 4), "token_src", EXT_BYTES(i.token_src, nt * 4));
#undef EXT_BYTES
}

/* dlpack_interface(capsule, name) -> (__array_interface__, dtype): how NumPy views the tensor of an unconsumed
 * "dltensor" capsule (attn._arrays.as_numpy; the interface gives raw items, `dtype` their NumPy dtype or its
 * type string). Also dtypes attn does not compute in (float64, int8, int16), which attn._arrays names in its
 * errors or converts. A tensor that NumPy cannot view raises the family's error naming `name`. */
static _Alignas(64) char g_empty_data[64]; /* the address of an empty view whose producer gave data = NULL */

static PyObject *py_dlpack_interface(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("dlpack_interface", 2);
    const char *name = PyUnicode_AsUTF8(args[1]);
    ext_dl_managed *m = name ? (ext_dl_managed *)PyCapsule_GetPointer(args[0], "dltensor") : NULL;
    if (m == NULL)
        return NULL;
    const ext_dl_tensor *t = &m->dl_tensor;
    const ext_dl_dtype d = t->dtype;
    if (t->device.device_type != EXT_DL_CPU && t->device.device_type != EXT_DL_CUDA_HOST)
        return ext_error(0, ATTN_STATUS_INVALID_ARGUMENT,
                         "%s: attn runs on the CPU; got a DLPack tensor on device "
                         "type %d",
                         name, (int)t->device.device_type);
    const int code = ext_dl_attn_dtype(d);
    const char *other = d.lanes != 1                             ? NULL
                        : d.code == EXT_DL_FLOAT && d.bits == 64 ? "<f8"
                        : d.code == EXT_DL_INT && d.bits == 8    ? "|i1"
                        : d.code == EXT_DL_INT && d.bits == 16   ? "<i2"
                                                                 : NULL;
    PyObject *dtype = code >= 0 ? Py_XNewRef(g_py.np_dtype[code]) : other ? PyUnicode_FromString(other) : NULL;
    if (dtype == NULL)
        return ext_error(1, ATTN_STATUS_INVALID_ARGUMENT,
                         "%s: DLPack dtype (code=%d, bits=%d, lanes=%d) is not "
                         "supported%s",
                         name, d.code, d.bits, d.lanes,
                         code >= 0 ? " (bfloat16/float8 need: pip install ml_dtypes)" : "");
    const int64_t item = (d.bits + 7) / 8;
    PyObject *shape = NULL, *strides = NULL, *iface = NULL;
    if (t->ndim < 0 || t->ndim > 64 || (t->ndim > 0 && t->shape == NULL)) {
        ext_error(0, ATTN_STATUS_INVALID_ARGUMENT, "%s: DLPack tensor with ndim=%d%s", name, (int)t->ndim,
                  t->ndim > 0 ? " and no shape" : "");
        goto done;
    }
    shape = PyList_New(t->ndim); /* (a list in the messages, as the NumPy shapes elsewhere) */
    strides = t->strides && t->ndim ? PyTuple_New(t->ndim) : Py_NewRef(Py_None);
    int64_t numel = 1, extent = item, negative = 0, overflow = 0;
    for (int i = 0; shape && strides && i < t->ndim; i++) {
        int64_t s;
        negative |= t->shape[i] < 0;
        overflow |= !ext_mul(numel, t->shape[i] > 0 ? t->shape[i] : 0, &numel) ||
                    !ext_mul(extent, t->shape[i] > 1 ? t->shape[i] : 1, &extent) ||
                    (t->strides && __builtin_mul_overflow(t->strides[i], item, &s));
        PyList_SET_ITEM(shape, i, PyLong_FromLongLong(t->shape[i]));
        if (t->strides)
            PyTuple_SET_ITEM(strides, i, PyLong_FromLongLong(overflow ? 0 : s));
    }
    if (shape == NULL || strides == NULL || PyErr_Occurred())
        goto done;
    if (negative)
        ext_error(0, ATTN_STATUS_INVALID_ARGUMENT, "%s: DLPack tensor shape %R has a negative size", name, shape);
    else if (overflow || extent > PY_SSIZE_T_MAX) /* NumPy refuses these views too, without naming the argument */
        ext_error(0, ATTN_STATUS_OVERFLOW,
                  "%s: DLPack tensor shape %R of %d-byte elements is larger than the "
                  "address space",
                  name, shape, (int)item);
    else if (t->data == NULL && numel > 0)
        ext_error(0, ATTN_STATUS_INVALID_ARGUMENT, "%s: DLPack tensor has data=NULL but %lld elements", name,
                  (long long)numel);
    else /* an empty tensor may carry data = NULL (torch.zeros(0, 3)): NumPy reads address 0 as "no buffer" */
        iface = Py_BuildValue("{sNsNs(NO)sOsi}N", "shape", PyList_AsTuple(shape), "typestr",
                              PyUnicode_FromFormat("|V%d", (int)item), "data",
                              PyLong_FromUnsignedLongLong(t->data == NULL ? (uintptr_t)&g_empty_data
                                                                          : (uintptr_t)t->data + t->byte_offset),
                              Py_False, "strides", strides, "version", 3, Py_NewRef(dtype));
done:
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_DECREF(dtype);
    return iface;
}

#define EXT_FAST(fn)                                                                                                   \
    { #fn, (PyCFunction)(void (*)(void))py_##fn, METH_FASTCALL, NULL }
#define EXT_O(fn)                                                                                                      \
    { #fn, (PyCFunction)(void (*)(void))py_##fn, METH_O, NULL }
#define EXT_NOARGS(fn)                                                                                                 \
    { #fn, (PyCFunction)(void (*)(void))py_##fn, METH_NOARGS, NULL }
#define EXT_GENERIC_METHODS                                                                                            \
    EXT_FAST(attn_copy_blocks), EXT_FAST(attn_swap_blocks), EXT_FAST(attn_swap_blocks_bytes),                          \
        EXT_FAST(attn_merge_attn_states_ex), EXT_FAST(attn_forward_padded), EXT_FAST(attn_ref_forward_padded),         \
        EXT_FAST(attn_forward_packed), EXT_FAST(attn_forward_piecewise), EXT_FAST(attn_ref_forward_piecewise),         \
        EXT_FAST(attn_forward_paged_piecewise), EXT_FAST(attn_ref_forward_paged_piecewise),                            \
        EXT_FAST(attn_forward_kv_prefix), EXT_FAST(attn_forward_prescaled), EXT_FAST(attn_forward_quant),              \
        EXT_FAST(attn_ref_forward_quant), EXT_FAST(attn_quantize_fp8), EXT_FAST(attn_dequantize_fp8),                  \
        EXT_FAST(attn_quantize_mx), EXT_FAST(attn_dequantize_mx), EXT_FAST(attn_hadamard_signs),                       \
        EXT_FAST(attn_hadamard_rotate), EXT_FAST(attn_ctx_set_num_threads), EXT_FAST(attn_version_number),             \
        EXT_FAST(attn_version_string), EXT_FAST(attn_status_string), EXT_FAST(attn_last_error),                        \
        EXT_FAST(attn_dtype_size), EXT_FAST(attn_dtype_name), EXT_FAST(attn_isa_count), EXT_FAST(attn_isa_name),       \
        EXT_FAST(attn_isa_opt_in_name), EXT_FAST(attn_cpu_features), EXT_FAST(attn_ctx_num_threads),                   \
        EXT_FAST(attn_ctx_isa), EXT_FAST(attn_forward_quant_kernels), EXT_FAST(attn_plan_workspace_size),              \
        EXT_FAST(attn_fp8_from_float), EXT_FAST(attn_fp8_to_float), EXT_FAST(attn_fp4_e2m1_from_float),                \
        EXT_FAST(attn_fp4_e2m1_to_float), EXT_FAST(attn_e8m0_to_float), EXT_NOARGS(attn_clear_error),                  \
        EXT_O(attn_isa_available), EXT_FAST(attn_ctx_set_isa), EXT_NOARGS(attn_ctx_create), EXT_O(attn_ctx_destroy),   \
        EXT_O(attn_plan_free), EXT_FAST(attn_forward_padded_workspace_size),                                           \
        EXT_FAST(attn_forward_prescaled_workspace_size), EXT_FAST(attn_forward_quant_workspace_size),                  \
        EXT_NOARGS(attn_capabilities_get), EXT_FAST(attn_plan_create), EXT_O(attn_plan_get_info),                      \
        EXT_FAST(dlpack_interface), EXT_FAST(attn_kv_cache_to_huge_pages), EXT_FAST(plan_step)

/* ================================================================================================
 * Module
 * ================================================================================================ */

/* {attn dtype: object} -> table[16] (new strong references). 0, or -1 with an exception set (before any object
 * is released with it set). */
static int ext_table(PyObject *dict, PyObject **table) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        const long d = PyLong_AsLong(key);
        if (d == -1 && PyErr_Occurred())
            return -1;
        if (d >= 0 && d < 16)
            Py_XSETREF(table[d], Py_NewRef(value));
    }
    return 0;
}

/* _init(ndarray, np_zeros, alloc_like, make_error, np_dtypes, view_dtypes, special_dtypes, as_view, refuse)
 *   np_dtypes: {attn dtype: numpy dtype}; view_dtypes: {attn dtype: same-width uint dtype} for bf16/fp8;
 *   special_dtypes: {numpy dtype: attn dtype} of dtypes without a buffer format; as_view / refuse: the
 *   attn._arrays helpers of the generic converter (ext_conv_tensor). */
static PyObject *ext_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    EXT_NARGS("_init", 9);
    if (!PyDict_Check(args[4]) || !PyDict_Check(args[5]) || !PyDict_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "attn._ext._init: expected dicts");
        return NULL;
    }
    if (attn_version_number() != ATTN_VERSION_NUMBER) { /* another build's attn.h: struct layouts may differ */
        PyErr_Format(PyExc_ImportError, "attn._ext was built for libattn %d, the loaded library is %u",
                     ATTN_VERSION_NUMBER, attn_version_number());
        return NULL;
    }
    attn_params_init_sized(&g_params_default, sizeof g_params_default);

    PyObject **slots[6] = {&g_py.ndarray_type, &g_py.np_empty, &g_py.alloc_like,
                           &g_py.make_error,   &g_as_view,     &g_refuse};
    const int from[6] = {0, 1, 2, 3, 7, 8};
    for (int i = 0; i < 6; i++) {
        Py_INCREF(args[from[i]]);
        Py_XSETREF(*slots[i], args[from[i]]);
    }
    if (ext_table(args[4], g_py.np_dtype) || ext_table(args[5], g_py.view_dtype))
        return NULL;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(args[6], &pos, &key, &value) && g_py.num_special < 16) {
        const long d = PyLong_AsLong(value);
        if (d == -1 && PyErr_Occurred())
            return NULL;
        Py_INCREF(key);
        g_py.special[g_py.num_special] = key;
        g_py.special_attn[g_py.num_special++] = (int)d;
    }
    Py_RETURN_NONE;
}

/* library_path() -> the file libattn was loaded from (dladdr of one of its entries). */
static PyObject *py_library_path(PyObject *self, PyObject *unused) {
    Dl_info info;
    if (dladdr((void *)(uintptr_t)&attn_version_number, &info) == 0 || info.dli_fname == NULL)
        return PyUnicode_FromString("");
    return PyUnicode_DecodeFSDefault(info.dli_fname);
}

/* torch_exchange() -> True once torch tensors are read through torch's DLPack exchange table (ext_from_torch). */
static PyObject *py_torch_exchange(PyObject *self, PyObject *unused) {
    return PyBool_FromLong(g_py.torch_api != NULL);
}

static PyMethodDef ext_methods[] = {
    {"_init", (PyCFunction)(void (*)(void))ext_init, METH_FASTCALL, "Hands over libattn and NumPy objects."},
    {"paged_attention", (PyCFunction)(void (*)(void))ext_paged_attention, METH_FASTCALL,
     "attn_paged_attention / attn_ref_paged_attention."},
    {"forward_paged", (PyCFunction)(void (*)(void))ext_forward_paged, METH_FASTCALL, "attn_forward_paged."},
    {"reshape_and_cache", (PyCFunction)(void (*)(void))ext_reshape_and_cache, METH_FASTCALL,
     "attn_reshape_and_cache (_scaled / _ex for fp8 caches)."},
    {"vllm_reshape_and_cache", (PyCFunction)(void (*)(void))ext_vllm_reshape_and_cache, METH_FASTCALL,
     "vllm_ops.reshape_and_cache fast path (NotImplemented for two separate caches)."},
    {"merge_attn_states", (PyCFunction)(void (*)(void))ext_merge_attn_states, METH_FASTCALL, "attn_merge_attn_states."},
    {"forward", (PyCFunction)(void (*)(void))ext_forward, METH_FASTCALL, "attn_forward / attn_ref_forward."},
    {"varlen", (PyCFunction)(void (*)(void))ext_varlen, METH_FASTCALL,
     "attn_forward_varlen / attn_ref_forward_varlen."},
    {"kvcache", (PyCFunction)(void (*)(void))ext_kvcache, METH_FASTCALL,
     "flash_attn_with_kvcache fast path (NotImplemented outside it)."},
    {"varlen_paged", (PyCFunction)(void (*)(void))ext_varlen_paged, METH_FASTCALL,
     "flash_attn_varlen_func(block_table=...) fast path (NotImplemented outside it)."},
    EXT_GENERIC_METHODS,
    EXT_NOARGS(library_path),
    EXT_NOARGS(torch_exchange),
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef ext_module = {PyModuleDef_HEAD_INIT,
                                        "attn._ext",
                                        "The attn package's binding of libattn (see _ext.c).",
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
    /* attn_request's layout: attn.ops builds the plan's requests as one NumPy record array of it */
    PyObject *layout = Py_BuildValue(
        "{snsnsnsnsnsnsnsn}", "num_computed_tokens", (Py_ssize_t)offsetof(attn_request, num_computed_tokens),
        "num_scheduled_tokens", (Py_ssize_t)offsetof(attn_request, num_scheduled_tokens), "num_spec_tokens",
        (Py_ssize_t)offsetof(attn_request, num_spec_tokens), "kind", (Py_ssize_t)offsetof(attn_request, kind),
        "block_ids", (Py_ssize_t)offsetof(attn_request, block_ids), "num_block_ids",
        (Py_ssize_t)offsetof(attn_request, num_block_ids), "encoder_len",
        (Py_ssize_t)offsetof(attn_request, encoder_len), "itemsize", (Py_ssize_t)sizeof(attn_request));
    if (layout == NULL || PyModule_AddObject(m, "REQUEST_LAYOUT", layout) != 0) {
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
