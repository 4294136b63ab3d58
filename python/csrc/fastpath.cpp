// flashjit._fastpath: the eager flashjit.attention call in C++.
//
// Why: an eager call whose plan exists (flashjit/_torch_eager.py, _Plan) needs
// only the tensors' metadata for the plan's key, two new tensors (O and
// LSE), five data pointers and one C call. Done in Python that is a few
// dozen interpreted steps, two torch.empty calls through PyTorch's argument
// parser and a ctypes call (docs/performance.md has the host times). Here
// the same steps read the at::Tensor fields directly and allocate through
// ATen, the way PyTorch's own operators do.
//
// This module decides nothing on its own: plans are made, checked and
// stored by the Python code, which also keeps every error message. forward()
// returns None whenever the call is not the plain case (no plan yet, an
// autograd graph to record, another device current, a misaligned pointer, a
// persistent kernel not yet primed on this stream, any C++ exception while
// allocating), and the Python path then runs the call and raises what it
// raises. Built by `pip install --no-build-isolation ./python` where
// PyTorch and a C++ compiler are present (setup.py); without it the Python
// path does all of this itself.

#include <Python.h>

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>

namespace {

// flashjit_kernel_forward (flashjit.h): the five DLTensors are only passed
// through, so they are opaque here; DLTensor's first field is its data
// pointer, the one field written per call.
using ForwardFn = int (*)(void *, const void *, const void *, const void *, const void *,
                          const void *, double, void *);

// The C side of a _Plan: what a call needs besides the tensors.
struct NativePlan {
  PyObject_HEAD
  ForwardFn fn;
  void *handle;
  void *tensors[5]; // DLTensor * of q, k, v, o, lse (owned by the _Plan)
  double scale;
  int64_t lseShape[3];
  int64_t oStrides[4]; // torch.empty_like(q)'s strides for the plan's q
  long long device;
  int tileCounter;
  PyObject *handleObject; // the handle as an int, for the primed-pair lookup
  PyObject *check;        // Library.check: raises the status's exception
};

void planDealloc(PyObject *self) {
  auto *plan = reinterpret_cast<NativePlan *>(self);
  Py_XDECREF(plan->handleObject);
  Py_XDECREF(plan->check);
  Py_TYPE(self)->tp_free(self);
}

PyTypeObject planType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// Plan(fn, handle, (q, k, v, o, lse addresses), scale, (b, h, s), O's
// strides, device, tile_counter, check)
PyObject *makePlan(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  unsigned long long fn, handle;
  PyObject *tensors, *check;
  double scale;
  long long b, h, s, device;
  long long oStrides[4];
  int tileCounter;
  if (kwargs && PyDict_GET_SIZE(kwargs)) {
    PyErr_SetString(PyExc_TypeError, "Plan takes positional arguments only");
    return nullptr;
  }
  if (!PyArg_ParseTuple(args, "KKOd(LLL)(LLLL)LpO", &fn, &handle, &tensors, &scale, &b, &h,
                        &s, &oStrides[0], &oStrides[1], &oStrides[2], &oStrides[3], &device,
                        &tileCounter, &check))
    return nullptr;
  if (!PyTuple_Check(tensors) || PyTuple_GET_SIZE(tensors) != 5) {
    PyErr_SetString(PyExc_TypeError, "Plan: expected 5 DLTensor addresses");
    return nullptr;
  }
  auto *plan = reinterpret_cast<NativePlan *>(type->tp_alloc(type, 0));
  if (!plan)
    return nullptr;
  plan->handleObject = nullptr;
  plan->check = nullptr;
  for (int i = 0; i < 5; ++i) {
    plan->tensors[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(tensors, i));
    if (PyErr_Occurred()) {
      Py_DECREF(plan);
      return nullptr;
    }
  }
  plan->fn = reinterpret_cast<ForwardFn>(static_cast<uintptr_t>(fn));
  plan->handle = reinterpret_cast<void *>(static_cast<uintptr_t>(handle));
  plan->scale = scale;
  plan->lseShape[0] = b;
  plan->lseShape[1] = h;
  plan->lseShape[2] = s;
  for (int d = 0; d < 4; ++d)
    plan->oStrides[d] = oStrides[d];
  plan->device = device;
  plan->tileCounter = tileCounter;
  plan->handleObject = PyLong_FromUnsignedLongLong(handle);
  Py_INCREF(check);
  plan->check = check;
  if (!plan->handleObject) {
    Py_DECREF(plan);
    return nullptr;
  }
  return reinterpret_cast<PyObject *>(plan);
}

// The metadata a plan depends on, per tensor: sizes, strides, and dtype with
// device in one word.
constexpr int kWordsPerTensor = 9;

bool fillMeta(PyObject *object, int64_t *words) {
  const at::Tensor &t = THPVariable_Unpack(object);
  if (!t.defined() || t.layout() != at::kStrided || t.is_nested() || t.dim() != 4)
    return false;
  auto sizes = t.sizes();
  auto strides = t.strides();
  for (int d = 0; d < 4; ++d) {
    words[d] = sizes[d];
    words[4 + d] = strides[d];
  }
  at::Device device = t.device();
  words[8] = (static_cast<int64_t>(t.scalar_type()) << 16) |
             (static_cast<int64_t>(device.type()) << 8) |
             static_cast<int64_t>(static_cast<uint8_t>(device.index()));
  return true;
}

// (options, metadata bytes): the key of a call, or None where the Python
// key must be used (not three exact 4-d strided tensors).
PyObject *keyOf(PyObject *q, PyObject *k, PyObject *v, PyObject *options) {
  if (!THPVariable_CheckExact(q) || !THPVariable_CheckExact(k) || !THPVariable_CheckExact(v))
    Py_RETURN_NONE;
  int64_t words[3 * kWordsPerTensor];
  try {
    if (!fillMeta(q, words) || !fillMeta(k, words + kWordsPerTensor) ||
        !fillMeta(v, words + 2 * kWordsPerTensor))
      Py_RETURN_NONE;
  } catch (...) { // a tensor without plain sizes and strides: the Python path's case
    Py_RETURN_NONE;
  }
  PyObject *meta = PyBytes_FromStringAndSize(reinterpret_cast<const char *>(words),
                                             sizeof words);
  if (!meta)
    return nullptr;
  PyObject *key = PyTuple_New(2);
  if (!key) {
    Py_DECREF(meta);
    return nullptr;
  }
  Py_INCREF(options);
  PyTuple_SET_ITEM(key, 0, options);
  PyTuple_SET_ITEM(key, 1, meta);
  return key;
}

// key(q, k, v, options) -> the plan key, or None
PyObject *key(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 4) {
    PyErr_SetString(PyExc_TypeError, "key(q, k, v, options)");
    return nullptr;
  }
  return keyOf(args[0], args[1], args[2], args[3]);
}

PyObject *nativeAttr; // "native", interned

// Owns one reference (or none) until the end of the scope.
struct Ref {
  PyObject *p;
  explicit Ref(PyObject *object) : p(object) {}
  Ref(const Ref &) = delete;
  Ref &operator=(const Ref &) = delete;
  ~Ref() { Py_XDECREF(p); }
};

// forward(plans, q, k, v, options, current_device, raw_stream, primed) ->
// (O, LSE) or None. plans: the thread's dict of _Plan by key;
// current_device(): the current CUDA device; raw_stream(device): its current
// stream as an int; primed: the set of (handle, stream) pairs persistent
// kernels have run on. The two functions are called only once a plan is
// found, as the Python path does.
PyObject *forward(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 8) {
    PyErr_SetString(PyExc_TypeError,
                    "forward(plans, q, k, v, options, current_device, raw_stream, primed)");
    return nullptr;
  }
  PyObject *plans = args[0], *q = args[1], *k = args[2], *v = args[3], *primed = args[7];
  Ref key{keyOf(q, k, v, args[4])};
  if (!key.p)
    return nullptr;
  if (key.p == Py_None)
    Py_RETURN_NONE;
  // keyOf checked that q, k and v are exactly torch.Tensor.
  const at::Tensor &tq = THPVariable_Unpack(q);
  const at::Tensor &tk = THPVariable_Unpack(k);
  const at::Tensor &tv = THPVariable_Unpack(v);
  if (c10::GradMode::is_enabled() &&
      (tq.requires_grad() || tk.requires_grad() || tv.requires_grad()))
    Py_RETURN_NONE; // an autograd graph to record: the op's path
  // A strong reference: the _Plan owns the DLTensors written below.
  Ref found{PyDict_GetItemWithError(plans, key.p)};
  if (!found.p) {
    if (PyErr_Occurred()) { // an unhashable option: the Python path says so
      if (!PyErr_ExceptionMatches(PyExc_TypeError))
        return nullptr;
      PyErr_Clear();
    }
    Py_RETURN_NONE;
  }
  Py_INCREF(found.p);
  Ref nativeObject{PyObject_GetAttr(found.p, nativeAttr)};
  if (!nativeObject.p) { // _NO_PLAN
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  if (Py_TYPE(nativeObject.p) != &planType) // a plan made without this module
    Py_RETURN_NONE;
  auto *plan = reinterpret_cast<NativePlan *>(nativeObject.p);

  Ref deviceObject{PyObject_CallNoArgs(args[5])};
  if (!deviceObject.p)
    return nullptr;
  long long device = PyLong_AsLongLong(deviceObject.p);
  if (device == -1 && PyErr_Occurred())
    return nullptr;
  if (device != plan->device)
    Py_RETURN_NONE;
  void *pq, *pk, *pv;
  try {
    pq = tq.data_ptr();
    pk = tk.data_ptr();
    pv = tv.data_ptr();
  } catch (...) {
    Py_RETURN_NONE;
  }
  if ((reinterpret_cast<uintptr_t>(pq) | reinterpret_cast<uintptr_t>(pk) |
       reinterpret_cast<uintptr_t>(pv)) & 15) // the Python path names the tensor
    Py_RETURN_NONE;
  Ref streamObject{PyObject_CallOneArg(args[6], deviceObject.p)};
  if (!streamObject.p)
    return nullptr;
  void *stream = PyLong_AsVoidPtr(streamObject.p);
  if (PyErr_Occurred())
    return nullptr;
  if (plan->tileCounter) {
    Ref pair{PyTuple_Pack(2, plan->handleObject, streamObject.p)};
    int seen = pair.p ? PySet_Contains(primed, pair.p) : -1;
    if (seen < 0)
      return nullptr;
    if (!seen) // the Python path primes it (or refuses a graph capture)
      Py_RETURN_NONE;
  }

  at::Tensor o, lse;
  try {
    // empty_like(q) without its dispatch to empty_strided: the strides it
    // gives for this plan's q (the key holds q's sizes and strides).
    // Straight from q's allocator (PyTorch's caching allocator for a
    // tensor it allocated) as at::empty_strided's device kernel does, but
    // without the two trips through the dispatcher; q from foreign memory
    // (no allocator) takes at::empty_strided.
    c10::Allocator *allocator = tq.storage().allocator();
    if (allocator) {
      const c10::DispatchKeySet keys(
          c10::computeDispatchKey(tq.scalar_type(), tq.layout(), tq.device()));
      o = at::detail::empty_strided_generic(tq.sizes(), at::IntArrayRef(plan->oStrides, 4),
                                            allocator, keys, tq.scalar_type());
      const int64_t lseStrides[3] = {plan->lseShape[1] * plan->lseShape[2],
                                     plan->lseShape[2], 1};
      lse = at::detail::empty_strided_generic(at::IntArrayRef(plan->lseShape, 3),
                                              at::IntArrayRef(lseStrides, 3), allocator,
                                              keys, at::kFloat);
    } else {
      o = at::empty_strided(tq.sizes(), at::IntArrayRef(plan->oStrides, 4), tq.options());
      lse = at::empty(at::IntArrayRef(plan->lseShape, 3), tq.options().dtype(at::kFloat));
    }
  } catch (...) { // out of memory and the like: the Python path raises torch's error
    Py_RETURN_NONE;
  }
  void *const data[5] = {pq, pk, pv, o.data_ptr(), lse.data_ptr()};
  for (int i = 0; i < 5; ++i)
    std::memcpy(plan->tensors[i], &data[i], sizeof(void *));
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = plan->fn(plan->handle, plan->tensors[0], plan->tensors[1], plan->tensors[2],
                    plan->tensors[3], plan->tensors[4], plan->scale, stream);
  Py_END_ALLOW_THREADS
  if (status != 0) {
    Ref checked{PyObject_CallFunction(plan->check, "i", status)};
    if (!checked.p)
      return nullptr;
  }
  Ref po{THPVariable_Wrap(std::move(o))};
  if (!po.p)
    return nullptr;
  Ref plse{THPVariable_Wrap(std::move(lse))};
  if (!plse.p)
    return nullptr;
  return PyTuple_Pack(2, po.p, plse.p);
}

PyMethodDef methods[] = {
    {"key", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(key)), METH_FASTCALL,
     "key(q, k, v, options): the plan key of a call, or None"},
    {"forward", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(forward)),
     METH_FASTCALL,
     "forward(plans, q, k, v, options, current_device, raw_stream, primed): (O, LSE), or "
     "None where the Python path must run the call"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef moduleDef = {PyModuleDef_HEAD_INIT, "flashjit._fastpath",
                         "The eager flashjit.attention call in C++ (see fastpath.cpp).", -1,
                         methods};

} // namespace

PyMODINIT_FUNC PyInit__fastpath() {
  planType.tp_name = "flashjit._fastpath.Plan";
  planType.tp_basicsize = sizeof(NativePlan);
  planType.tp_flags = Py_TPFLAGS_DEFAULT;
  planType.tp_dealloc = planDealloc;
  planType.tp_doc = "Plan(fn, handle, dltensor_addresses, scale, lse_shape, o_strides, "
                    "device, tile_counter, check): the C side of a flashjit._torch_eager._Plan.";
  planType.tp_new = makePlan;
  if (PyType_Ready(&planType) < 0)
    return nullptr;
  nativeAttr = PyUnicode_InternFromString("native");
  if (!nativeAttr)
    return nullptr;
  PyObject *module = PyModule_Create(&moduleDef);
  if (!module)
    return nullptr;
  // What flashjit/_torch_eager.py expects of this module (Plan's arguments,
  // forward's); it ignores a module built from other sources.
  if (PyModule_AddIntConstant(module, "INTERFACE", 2) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  Py_INCREF(&planType);
  if (PyModule_AddObject(module, "Plan", reinterpret_cast<PyObject *>(&planType)) < 0) {
    Py_DECREF(&planType);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
