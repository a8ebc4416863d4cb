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
//
// It also holds the base class of compiled functions' call path (Dispatch):
// the lookup "first entry whose guard holds, then its code" without a Python
// frame of its own, and so without packing the arguments into *args/**kwargs
// twice (once for the wrapper, once for the guard).

#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <structmember.h>

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

// ---------------------------------------------------------------------------
// Dispatch: the call of a compiled function (cache.CompiledFunction's native
// base).  Semantics are those of CompiledFunction.__call__ in Python:
//
//   if sys.gettrace() is not None or force_eager: return self._fn(*args, **kwargs)
//   for entry in self._entries:
//       try: hit = entry.guard.check(*args, **kwargs)
//       except TypeError: break
//       if hit: STATS.cache_hits += 1; return entry.fn(*args, **kwargs)
//   return self._native_miss(args, kwargs)(*args, **kwargs)   # compiles on a miss
//
// It is a vectorcall: the guard and the entry receive the caller's argument
// array as it is (Python 3.11 calls a subclass's instances through tp_call,
// which unpacks the tuple; 3.12+ inherits the vectorcall itself).
// ``_entries`` is a slot of the object; the Python class reads and writes it
// as an attribute.

struct Dispatch {
  PyObject_HEAD
  vectorcallfunc vectorcall;  // Dispatch_vectorcall (Python 3.12+ calls subclasses' instances through it)
  PyObject* entries;
};

PyObject* s_guard = nullptr;
PyObject* s_check = nullptr;
PyObject* s_fn = nullptr;
PyObject* s_orig_fn = nullptr;
PyObject* s_native_miss = nullptr;
PyObject* s_cache_hits = nullptr;
PyObject* g_stats = nullptr;  // diagnostics.STATS (set_stats), or NULL: hits are not counted
bool g_force_eager = false;   // set_stance("force_eager") (set_force_eager)

int count_hit() {
  if (g_stats == nullptr) {
    return 0;
  }
  PyObject* old = PyObject_GetAttr(g_stats, s_cache_hits);
  if (old == nullptr) {
    return -1;
  }
  PyObject* one = PyLong_FromLong(1);
  PyObject* now = one == nullptr ? nullptr : PyNumber_Add(old, one);
  Py_DECREF(old);
  Py_XDECREF(one);
  if (now == nullptr) {
    return -1;
  }
  int rc = PyObject_SetAttr(g_stats, s_cache_hits, now);
  Py_DECREF(now);
  return rc;
}

// attr of attr of obj (a new reference), or NULL with an exception set
PyObject* get_attr2(PyObject* obj, PyObject* a, PyObject* b) {
  PyObject* mid = PyObject_GetAttr(obj, a);
  if (mid == nullptr) {
    return nullptr;
  }
  PyObject* out = PyObject_GetAttr(mid, b);
  Py_DECREF(mid);
  return out;
}

// args[:nargs] positional, then one per name in kwnames: as a tuple and a dict
int unpack(PyObject* const* args, size_t nargsf, PyObject* kwnames, PyObject** tuple, PyObject** dict) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  *tuple = PyTuple_New(nargs);
  *dict = PyDict_New();
  if (*tuple == nullptr || *dict == nullptr) {
    Py_CLEAR(*tuple);
    Py_CLEAR(*dict);
    return -1;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    Py_INCREF(args[i]);
    PyTuple_SET_ITEM(*tuple, i, args[i]);
  }
  Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    if (PyDict_SetItem(*dict, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
      Py_CLEAR(*tuple);
      Py_CLEAR(*dict);
      return -1;
    }
  }
  return 0;
}

// The first entry of ``entries`` whose guard.check(*args) holds, counted as a
// cache hit: 1 and *found (a new reference); 0 for none (a TypeError from
// the check, arguments that do not bind, is a miss too); -1 with an exception.
int find_entry(PyObject* entries, PyObject* const* args, size_t nargsf, PyObject* kwnames, PyObject** found) {
  *found = nullptr;
  if (entries == nullptr || !PyList_CheckExact(entries)) {
    return 0;
  }
  Py_INCREF(entries);
  int status = 0;
  // (the size is read again each round: a guard may run code that adds or drops entries)
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); ++i) {
    PyObject* entry = PyList_GET_ITEM(entries, i);
    Py_INCREF(entry);
    PyObject* check = get_attr2(entry, s_guard, s_check);
    if (check == nullptr) {
      Py_DECREF(entry);
      status = -1;
      break;
    }
    PyObject* r = PyObject_Vectorcall(check, args, nargsf, kwnames);
    Py_DECREF(check);
    int hit = -1;
    if (r != nullptr) {
      hit = PyObject_IsTrue(r);
      Py_DECREF(r);
    } else if (PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      Py_DECREF(entry);
      break;
    }
    if (hit > 0 && count_hit() < 0) {
      hit = -1;
    }
    if (hit != 0) {
      if (hit > 0) {
        *found = entry;
        status = 1;
      } else {
        Py_DECREF(entry);
        status = -1;
      }
      break;
    }
    Py_DECREF(entry);
  }
  Py_DECREF(entries);
  return status;
}

PyObject* Dispatch_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (PyThreadState_Get()->c_traceobj != nullptr || g_force_eager) {
    // a line tracer (debugger, coverage, sys.settrace) is watching: the
    // original function runs, so it sees the lines and frames it expects
    // (and under set_stance("force_eager") it runs as it is)
    PyObject* fn = PyObject_GetAttr(self, s_orig_fn);
    if (fn == nullptr) {
      return nullptr;
    }
    PyObject* out = PyObject_Vectorcall(fn, args, nargsf, kwnames);
    Py_DECREF(fn);
    return out;
  }
  PyObject* entry;
  int found = find_entry(reinterpret_cast<Dispatch*>(self)->entries, args, nargsf, kwnames, &entry);
  if (found < 0) {
    return nullptr;
  }
  if (found > 0) {
    PyObject* fn = PyObject_GetAttr(entry, s_fn);
    Py_DECREF(entry);
    if (fn == nullptr) {
      return nullptr;
    }
    PyObject* out = PyObject_Vectorcall(fn, args, nargsf, kwnames);
    Py_DECREF(fn);
    return out;
  }
  // A miss: Python compiles (or picks) what to run, and it runs from here,
  // so no frame of bytegraph's sits between the caller and the function (a
  // warning's stacklevel, sys._getframe(1) see the caller, as in eager).
  PyObject *tuple, *dict;
  if (unpack(args, nargsf, kwnames, &tuple, &dict) < 0) {
    return nullptr;
  }
  PyObject* target = PyObject_CallMethodObjArgs(self, s_native_miss, tuple, dict, nullptr);
  Py_DECREF(tuple);
  Py_DECREF(dict);
  if (target == nullptr) {
    return nullptr;
  }
  PyObject* out = PyObject_Vectorcall(target, args, nargsf, kwnames);
  Py_DECREF(target);
  return out;
}

PyObject* Dispatch_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject* self = PyType_GenericNew(type, args, kwargs);
  if (self != nullptr) {
    reinterpret_cast<Dispatch*>(self)->vectorcall = Dispatch_vectorcall;
  }
  return self;
}

int Dispatch_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(reinterpret_cast<Dispatch*>(self)->entries);
  return 0;
}

int Dispatch_clear(PyObject* self) {
  Py_CLEAR(reinterpret_cast<Dispatch*>(self)->entries);
  return 0;
}

void Dispatch_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  Dispatch_clear(self);
  Py_TYPE(self)->tp_free(self);
}

PyMemberDef Dispatch_members[] = {
    {const_cast<char*>("_entries"), T_OBJECT_EX, offsetof(Dispatch, entries), 0,
     const_cast<char*>("the cache entries, tried in order")},
    {nullptr, 0, 0, 0, nullptr}};

PyTypeObject DispatchType = {
    PyVarObject_HEAD_INIT(nullptr, 0)
};

// ---------------------------------------------------------------------------
// Selector: the hit path of cache.FrameRunner.select (its native base).
// Transformed code calls ``select(fn, *args)`` for each continuation (resume
// function, loop body) it enters; fn was just made with the live cells as its
// closure.  On a hit this returns the entry's code as a function with fn's
// globals and closure, as CacheEntry.function_for does.  Everything else (a
// line tracer, a deep stack) goes to the Python method ``_select_slow``,
// which is FrameRunner's whole logic; a miss to ``_select_miss``.

PyObject* s_code = nullptr;
PyObject* s_select_slow = nullptr;
PyObject* s_select_miss = nullptr;

// May more Python frames be active than continuations may nest (a third of
// the recursion limit)?  The interpreter's recursion counter bounds the
// Python frames on the stack from above, so "no" is certain and "yes" is
// checked again exactly in Python.
bool maybe_deep(PyThreadState* ts) {
#if PY_VERSION_HEX >= 0x030C0000
  int limit = ts->py_recursion_limit, used = limit - ts->py_recursion_remaining;
#else
  int limit = ts->recursion_limit, used = limit - ts->recursion_remaining;
#endif
  return used > limit / 3;
}

// self.<method>(*args)
PyObject* call_method(PyObject* self, PyObject* method, PyObject* const* args, Py_ssize_t nargs) {
  std::vector<PyObject*> call(nargs + 1);
  call[0] = self;
  std::copy(args, args + nargs, call.begin() + 1);
  return PyObject_VectorcallMethod(method, call.data(), nargs + 1, nullptr);
}

PyObject* select_slow(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  return call_method(self, s_select_slow, args, nargs);
}

// entry.code as a function with fn's globals, name and closure (CacheEntry.function_for)
PyObject* function_for(PyObject* entry, PyObject* fn) {
  PyObject* code = PyObject_GetAttr(entry, s_code);
  if (code == nullptr) {
    return nullptr;
  }
  if (code == Py_None) {
    Py_DECREF(code);
    Py_INCREF(fn);
    return fn;
  }
  PyObject* out = PyFunction_New(code, PyFunction_GET_GLOBALS(fn));
  Py_DECREF(code);
  if (out == nullptr) {
    return nullptr;
  }
  PyObject* name = reinterpret_cast<PyFunctionObject*>(fn)->func_name;
  PyObject* closure = PyFunction_GET_CLOSURE(fn);
  if ((name != reinterpret_cast<PyFunctionObject*>(out)->func_name &&
       PyObject_SetAttrString(out, "__name__", name) < 0) ||
      (closure != nullptr && PyFunction_SetClosure(out, closure) < 0)) {
    Py_DECREF(out);
    return nullptr;
  }
  return out;
}

PyObject* Selector_select(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  PyThreadState* ts = PyThreadState_Get();
  PyObject* entries = reinterpret_cast<Dispatch*>(self)->entries;
  if (nargs < 1 || !PyFunction_Check(args[0]) || ts->c_traceobj != nullptr || maybe_deep(ts) ||
      entries == nullptr || !PyList_CheckExact(entries)) {
    return select_slow(self, args, nargs);
  }
  PyObject* fn = args[0];
  // the guard's arguments: fn's closure (None without cells), then args[1:]
  PyObject* small[9];
  std::vector<PyObject*> big;
  PyObject** gargs = small;
  if (nargs > 9) {
    big.resize(nargs);
    gargs = big.data();
  }
  PyObject* cells = PyFunction_GET_CLOSURE(fn);
  gargs[0] = cells != nullptr ? cells : Py_None;
  std::copy(args + 1, args + nargs, gargs + 1);
  PyObject* entry;
  int found = find_entry(entries, gargs, nargs, nullptr, &entry);
  if (found < 0) {
    return nullptr;
  }
  if (found == 0) {
    return call_method(self, s_select_miss, args, nargs);
  }
  PyObject* out = function_for(entry, fn);
  Py_DECREF(entry);
  return out;
}

PyMethodDef Selector_methods[] = {
    {"select", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Selector_select)), METH_FASTCALL,
     "select(fn, *args) -> the function to call with args for generated function fn"},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject SelectorType = {
    PyVarObject_HEAD_INIT(nullptr, 0)
};

// set_stats(stats): the object whose ``cache_hits`` a hit increments
PyObject* set_stats(PyObject*, PyObject* stats) {
  Py_INCREF(stats);
  Py_XSETREF(g_stats, stats);
  Py_RETURN_NONE;
}

// set_force_eager(flag): compiled functions run their original code (set_stance("force_eager"))
PyObject* set_force_eager(PyObject*, PyObject* flag) {
  int on = PyObject_IsTrue(flag);
  if (on < 0) {
    return nullptr;
  }
  g_force_eager = on != 0;
  Py_RETURN_NONE;
}

PyMethodDef module_methods[] = {
    {"distinct", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(distinct)), METH_FASTCALL,
     "distinct(*objs) -> bool: no object appears twice"},
    {"code_of", code_of, METH_O, "code_of(f) -> f.__code__, without the attribute read's audit event"},
    {"defaults_of", defaults_of, METH_O, "defaults_of(f) -> f.__defaults__, without the audit event"},
    {"kwdefaults_of", kwdefaults_of, METH_O, "kwdefaults_of(f) -> f.__kwdefaults__, without the audit event"},
    {"set_force_eager", set_force_eager, METH_O, "set_force_eager(flag): compiled functions run as they are"},
    {"set_stats", set_stats, METH_O, "set_stats(stats): the object whose cache_hits Dispatch hits increment"},
    {nullptr, nullptr, 0, nullptr}};

void init_entries_type(PyTypeObject* type, const char* name, const char* doc) {
  type->tp_name = name;
  type->tp_basicsize = sizeof(Dispatch);
  type->tp_dealloc = Dispatch_dealloc;
  type->tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC;
  type->tp_doc = doc;
  type->tp_traverse = Dispatch_traverse;
  type->tp_clear = Dispatch_clear;
  type->tp_members = Dispatch_members;
  type->tp_new = PyType_GenericNew;
}

int add_type(PyObject* m, const char* name, PyTypeObject* type) {
  Py_INCREF(type);
  if (PyModule_AddObject(m, name, reinterpret_cast<PyObject*>(type)) < 0) {
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

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
  // Dispatch and Selector hold a list of entries (Dispatch's layout)
  init_entries_type(&DispatchType, "bytegraph.native.Dispatch",
                    "the native call path of a compiled function (base of cache.CompiledFunction)");
  DispatchType.tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
  DispatchType.tp_vectorcall_offset = offsetof(Dispatch, vectorcall);
  DispatchType.tp_call = PyVectorcall_Call;
  DispatchType.tp_new = Dispatch_new;
  init_entries_type(&SelectorType, "bytegraph.native.Selector",
                    "the native hit path of cache.FrameRunner.select (its base)");
  SelectorType.tp_methods = Selector_methods;
  if (PyType_Ready(&DispatchType) < 0 || PyType_Ready(&SelectorType) < 0) {
    return nullptr;
  }
  s_code = PyUnicode_InternFromString("code");
  s_select_slow = PyUnicode_InternFromString("_select_slow");
  s_select_miss = PyUnicode_InternFromString("_select_miss");
  s_guard = PyUnicode_InternFromString("guard");
  s_check = PyUnicode_InternFromString("check");
  s_fn = PyUnicode_InternFromString("fn");
  s_orig_fn = PyUnicode_InternFromString("_fn");
  s_native_miss = PyUnicode_InternFromString("_native_miss");
  s_cache_hits = PyUnicode_InternFromString("cache_hits");
  if (!s_code || !s_select_slow || !s_select_miss || !s_guard || !s_check || !s_fn || !s_orig_fn || !s_native_miss || !s_cache_hits) {
    return nullptr;
  }
  PyObject* m = PyModule_Create(&module_def);
  if (m == nullptr) {
    return nullptr;
  }
  if (add_type(m, "TensorCheck", &TensorCheckType) < 0 || add_type(m, "Selector", &SelectorType) < 0 ||
      add_type(m, "Dispatch", &DispatchType) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
