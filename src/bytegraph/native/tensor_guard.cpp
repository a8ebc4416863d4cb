// Native tensor checks for bytegraph's generated guard functions.
//
// A guard function checks every input tensor's type, dtype, device, shape,
// strides and requires_grad on every call.  In Python that is six attribute
// reads per tensor (about 0.2 us each tensor, so 13 us for 64 inputs); here it
// is one call for all of them, reading the C++ tensor directly.
//
// Semantics are exactly those of the Python conditions bytegraph generates
// when this module is unavailable (see guards.py, TENSOR_MATCH and
// NO_ALIASING); tests compare the two on random tensors.
//
// Built by `python -m bytegraph.native build` against the installed torch.

#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <vector>

namespace {

enum class Layout { Any, Contiguous, Exact };

// What one tensor argument must look like.  A size of -1 is a dynamic
// dimension (not checked; the shape environment's guards cover it).
struct Spec {
  PyObject* type = nullptr;  // owned reference
  caffe2::TypeMeta dtype;
  c10::Device device{c10::kCPU};
  bool cpu = true;
  bool requires_grad = false;
  std::vector<int64_t> sizes;
  Layout layout = Layout::Any;
  std::vector<int64_t> strides;
};

bool matches(const Spec& s, PyObject* obj) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(obj)) != s.type) {
    return false;
  }
  // The type is exactly the recorded tensor type, so obj is a THPVariable.
  const c10::TensorImpl* t = THPVariable_Unpack(obj).unsafeGetTensorImpl();
  if (t->dtype() != s.dtype || t->requires_grad() != s.requires_grad) {
    return false;
  }
  if (s.cpu ? !t->device().is_cpu() : t->device() != s.device) {
    return false;
  }
  const auto sizes = t->sizes();
  if (sizes.size() != s.sizes.size()) {
    return false;
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (s.sizes[i] >= 0 && sizes[i] != s.sizes[i]) {
      return false;
    }
  }
  switch (s.layout) {
    case Layout::Any:
      return true;
    case Layout::Contiguous:
      return t->is_contiguous();
    case Layout::Exact: {
      const auto strides = t->strides();
      return std::equal(strides.begin(), strides.end(), s.strides.begin(), s.strides.end());
    }
  }
  return false;
}

struct TensorCheck {
  PyObject_HEAD
  std::vector<Spec>* specs;
};

void TensorCheck_dealloc(TensorCheck* self) {
  if (self->specs != nullptr) {
    for (auto& s : *self->specs) {
      Py_XDECREF(s.type);
    }
    delete self->specs;
  }
  Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

bool int_list(PyObject* seq, std::vector<int64_t>& out, bool none_is_dynamic) {
  PyObject* fast = PySequence_Fast(seq, "expected a sequence of ints");
  if (fast == nullptr) {
    return false;
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(fast, i);
    if (none_is_dynamic && item == Py_None) {
      out.push_back(-1);
      continue;
    }
    const long long v = PyLong_AsLongLong(item);
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return false;
    }
    out.push_back(v);
  }
  Py_DECREF(fast);
  return true;
}

// spec = (type, dtype, device, sizes, layout, requires_grad) where sizes holds
// ints or None (dynamic) and layout is None (unchecked), "contiguous", or a
// tuple of strides.
bool parse_spec(PyObject* item, Spec& s) {
  PyObject *type, *dtype, *device, *sizes, *layout;
  int requires_grad;
  if (!PyArg_ParseTuple(item, "OOOOOp", &type, &dtype, &device, &sizes, &layout, &requires_grad)) {
    return false;
  }
  if (!PyType_Check(type) || !THPDtype_Check(dtype) || !THPDevice_Check(device)) {
    PyErr_SetString(PyExc_TypeError, "spec must start with (type, torch.dtype, torch.device)");
    return false;
  }
  Py_INCREF(type);
  s.type = type;
  s.dtype = caffe2::TypeMeta::fromScalarType(reinterpret_cast<THPDtype*>(dtype)->scalar_type);
  s.device = reinterpret_cast<THPDevice*>(device)->device;
  s.cpu = s.device.is_cpu();
  s.requires_grad = requires_grad != 0;
  if (!int_list(sizes, s.sizes, true)) {
    return false;
  }
  if (layout == Py_None) {
    s.layout = Layout::Any;
  } else if (PyUnicode_Check(layout) && PyUnicode_CompareWithASCIIString(layout, "contiguous") == 0) {
    s.layout = Layout::Contiguous;
  } else {
    s.layout = Layout::Exact;
    if (!int_list(layout, s.strides, false)) {
      return false;
    }
  }
  return true;
}

PyObject* TensorCheck_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject* spec_list;
  if (!PyArg_ParseTuple(args, "O", &spec_list)) {
    return nullptr;
  }
  PyObject* fast = PySequence_Fast(spec_list, "TensorCheck(specs): specs must be a sequence");
  if (fast == nullptr) {
    return nullptr;
  }
  auto* self = reinterpret_cast<TensorCheck*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    Py_DECREF(fast);
    return nullptr;
  }
  self->specs = new std::vector<Spec>();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  self->specs->resize(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!parse_spec(PySequence_Fast_GET_ITEM(fast, i), (*self->specs)[i])) {
      Py_DECREF(fast);
      Py_DECREF(self);
      return nullptr;
    }
  }
  Py_DECREF(fast);
  return reinterpret_cast<PyObject*>(self);
}

// check(t0, t1, ...) -> bool: every argument matches its spec.
PyObject* TensorCheck_check(TensorCheck* self, PyObject* const* args, Py_ssize_t nargs) {
  const auto& specs = *self->specs;
  if (static_cast<size_t>(nargs) != specs.size()) {
    PyErr_Format(PyExc_TypeError, "check() takes %zd tensors (%zd given)",
                 static_cast<Py_ssize_t>(specs.size()), nargs);
    return nullptr;
  }
  try {
    for (Py_ssize_t i = 0; i < nargs; ++i) {
      if (!matches(specs[i], args[i])) {
        Py_RETURN_FALSE;
      }
    }
  } catch (...) {
    // e.g. strides() of a layout without strides: the Python guard's
    // try/except treats any error as a failed check, so does this.
    Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

PyObject* TensorCheck_len(TensorCheck* self, PyObject*) {
  return PyLong_FromSize_t(self->specs->size());
}

PyMethodDef TensorCheck_methods[] = {
    {"check", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(TensorCheck_check)), METH_FASTCALL,
     "check(*tensors) -> bool: every tensor matches its recorded spec"},
    {"count", reinterpret_cast<PyCFunction>(TensorCheck_len), METH_NOARGS, "number of tensors checked"},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject TensorCheckType = {
    PyVarObject_HEAD_INIT(nullptr, 0)
};

// distinct(*objs) -> bool: no object is passed twice (by identity).
PyObject* distinct(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs <= 16) {
    for (Py_ssize_t i = 0; i < nargs; ++i) {
      for (Py_ssize_t j = i + 1; j < nargs; ++j) {
        if (args[i] == args[j]) {
          Py_RETURN_FALSE;
        }
      }
    }
    Py_RETURN_TRUE;
  }
  std::vector<PyObject*> seen(args, args + nargs);
  std::sort(seen.begin(), seen.end());
  if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
    Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

// code_of(f), defaults_of(f), kwdefaults_of(f): a function's __code__,
// __defaults__ and __kwdefaults__ read from the object itself.  Reading them
// as attributes raises the "object.__getattr__" audit event, which costs a
// call into every Python audit hook (filelock, which transformers imports,
// installs one on 3.12+): about 0.25 us per read on every guard check.
// Anything but a plain function takes the attribute path.
// ``part`` is what the function slot holds (NULL for no defaults: None).
PyObject* function_part(PyObject* fn, PyObject* part, const char* attr) {
  if (!PyFunction_Check(fn)) {
    return PyObject_GetAttrString(fn, attr);
  }
  if (part == nullptr) {
    Py_RETURN_NONE;
  }
  Py_INCREF(part);
  return part;
}

PyObject* code_of(PyObject*, PyObject* fn) {
  return function_part(fn, PyFunction_Check(fn) ? PyFunction_GET_CODE(fn) : nullptr, "__code__");
}

PyObject* defaults_of(PyObject*, PyObject* fn) {
  return function_part(fn, PyFunction_Check(fn) ? PyFunction_GET_DEFAULTS(fn) : nullptr, "__defaults__");
}

PyObject* kwdefaults_of(PyObject*, PyObject* fn) {
  return function_part(fn, PyFunction_Check(fn) ? PyFunction_GET_KW_DEFAULTS(fn) : nullptr, "__kwdefaults__");
}

PyMethodDef module_methods[] = {
    {"distinct", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(distinct)), METH_FASTCALL,
     "distinct(*objs) -> bool: no object appears twice"},
    {"code_of", code_of, METH_O, "code_of(f) -> f.__code__, without the attribute read's audit event"},
    {"defaults_of", defaults_of, METH_O, "defaults_of(f) -> f.__defaults__, without the audit event"},
    {"kwdefaults_of", kwdefaults_of, METH_O, "kwdefaults_of(f) -> f.__kwdefaults__, without the audit event"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_native", "bytegraph's native guard checks", -1,
                          module_methods};

}  // namespace

PyMODINIT_FUNC PyInit__native(void) {
  TensorCheckType.tp_name = "bytegraph.native.TensorCheck";
  TensorCheckType.tp_basicsize = sizeof(TensorCheck);
  TensorCheckType.tp_dealloc = reinterpret_cast<destructor>(TensorCheck_dealloc);
  TensorCheckType.tp_flags = Py_TPFLAGS_DEFAULT;
  TensorCheckType.tp_doc = "TensorCheck(specs): checks a fixed list of tensors against recorded metadata";
  TensorCheckType.tp_methods = TensorCheck_methods;
  TensorCheckType.tp_new = TensorCheck_new;
  if (PyType_Ready(&TensorCheckType) < 0) {
    return nullptr;
  }
  PyObject* m = PyModule_Create(&module_def);
  if (m == nullptr) {
    return nullptr;
  }
  Py_INCREF(&TensorCheckType);
  if (PyModule_AddObject(m, "TensorCheck", reinterpret_cast<PyObject*>(&TensorCheckType)) < 0) {
    Py_DECREF(&TensorCheckType);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
