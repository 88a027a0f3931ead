/* mmapbloom/_guard.c: the SIGBUS handler of the guard (what it does: _guard.h). */
#include "_guard.h"

#ifdef MB_GUARD
static int mb_guard_arm(void);
__thread mb_guard *volatile mb_active MB_TLS_MODEL;
static struct sigaction mb_prev_bus;
static int mb_bus_installed;
/* The per-op check (mb_guard_check in _guard.h): _signal.getsignal's C function, its
 * module, the int SIGBUS, and what it answered when the guard was last (re)armed. */
PyCFunction mb_getsignal_fn;
PyObject *mb_getsignal_self, *mb_sigbus_num, *mb_bus_seen;
/* 1 while the remembered handler is a Python callable: the OS handler can then turn back
 * into Python's trampoline with no change getsignal can show (the same function set again,
 * faulthandler.disable() putting it back), so mb_guard_check asks sigaction on every op. */
int mb_bus_python;
static PyObject *mb_getsignal_obj;   /* the callable itself (kept alive; the fallback) */

static void mb_bus_handler(int sig, siginfo_t *si, void *ctx)
{
    mb_guard *g = mb_active;
    if (g != NULL) {
        if (si == NULL || si->si_code <= 0)
            return;   /* sent, not a fault: see above */
        const uint8_t *a = (const uint8_t *)si->si_addr;
        if ((a >= g->lo && a < g->hi) || (a >= g->lo2 && a < g->hi2)) {
            g->fault = a;
            mb_active = NULL;
            siglongjmp(g->env, 1);
        }
    }
    if (mb_prev_bus.sa_flags & SA_SIGINFO) {
        if (mb_prev_bus.sa_sigaction != NULL) {
            mb_prev_bus.sa_sigaction(sig, si, ctx);
            return;
        }
    } else if (mb_prev_bus.sa_handler != SIG_DFL && mb_prev_bus.sa_handler != SIG_IGN) {
        mb_prev_bus.sa_handler(sig);
        return;
    }
    {   /* the default action: restore it; a fault repeats when this returns, a sent signal
         * is sent again */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGBUS, &dfl, NULL);
        if (si == NULL || si->si_code <= 0)
            raise(sig);
    }
}

/* 1 if signal.getsignal(sig) is a Python callable (a handler set by signal.signal),
 * 0 if not, -1 with an exception. */
static int python_handler(int sig)
{
    PyObject *mod = PyImport_ImportModule("signal"), *h;
    int py;
    if (mod == NULL)
        return -1;
    h = PyObject_CallMethod(mod, "getsignal", "i", sig);
    Py_DECREF(mod);
    if (h == NULL)
        return -1;
    py = h != Py_None && !PyLong_Check(h) && PyCallable_Check(h);
    Py_DECREF(h);
    return py;
}

/* signal.getsignal(SIGBUS) through the callable (the fallback when _signal.getsignal is not
 * a METH_O builtin).  A new reference, or NULL with an exception. */
PyObject *mb_guard_getsignal_slow(void)
{
    if (mb_getsignal_obj == NULL && mb_guard_install() < 0)
        return NULL;
    return PyObject_CallOneArg(mb_getsignal_obj, mb_sigbus_num);
}

/* Remember what signal.getsignal(SIGBUS) answers now (the per-op check's reference). */
static int remember_seen(void)
{
    PyObject *cur;
    if (mb_getsignal_obj == NULL) {
        PyObject *mod = PyImport_ImportModule("_signal");
        if (mod == NULL)
            return -1;
        mb_getsignal_obj = PyObject_GetAttrString(mod, "getsignal");
        Py_DECREF(mod);
        if (mb_getsignal_obj == NULL || (mb_sigbus_num = PyLong_FromLong(SIGBUS)) == NULL) {
            Py_CLEAR(mb_getsignal_obj);
            return -1;
        }
        if (PyCFunction_Check(mb_getsignal_obj) && PyCFunction_GET_FLAGS(mb_getsignal_obj) == METH_O) {
            mb_getsignal_self = PyCFunction_GET_SELF(mb_getsignal_obj);
            mb_getsignal_fn = PyCFunction_GET_FUNCTION(mb_getsignal_obj);
        }
    }
    if ((cur = PyObject_CallOneArg(mb_getsignal_obj, mb_sigbus_num)) == NULL)
        return -1;
    mb_bus_python = cur != Py_None && !PyLong_Check(cur) && PyCallable_Check(cur);
    Py_XSETREF(mb_bus_seen, cur);   /* a strong reference: its address is never reused */
    return 0;
}

/* Python's own C signal handler (the "trampoline" signal.signal installs for a Python
 * function), learned from SIGINT: while signal.getsignal(SIGINT) is a callable (the default
 * KeyboardInterrupt handler or the user's), the interpreter has installed it there. */
static void (*mb_py_trampoline)(int);

static int learn_trampoline(void)
{
    struct sigaction intr;
    PyObject *mod, *h;
    int callable;
    if (mb_py_trampoline != NULL)
        return 0;
    if (sigaction(SIGINT, NULL, &intr) != 0 || (intr.sa_flags & SA_SIGINFO) || intr.sa_handler == SIG_DFL ||
        intr.sa_handler == SIG_IGN)
        return 0;
    if ((mod = PyImport_ImportModule("signal")) == NULL)
        return -1;
    h = PyObject_CallMethod(mod, "getsignal", "i", SIGINT);
    Py_DECREF(mod);
    if (h == NULL)
        return -1;
    callable = h != Py_None && !PyLong_Check(h) && PyCallable_Check(h);
    Py_DECREF(h);
    if (callable)
        mb_py_trampoline = intr.sa_handler;
    return 0;
}

/* Without the trampoline learned from SIGINT (a process started with SIGINT ignored:
 * nohup, a background job of a script, a daemon): tell it from a fatal-error handler by the
 * other fatal signals.  faulthandler.enable() puts one C function on SIGSEGV, SIGFPE,
 * SIGABRT, SIGILL and SIGBUS; the trampoline is on a signal only where signal.getsignal
 * reports a Python callable.  1 if fn is taken as the trampoline, 0 if it is another
 * function, -1 with an exception.  fn on none of them, or only where Python has a handler
 * too (faulthandler enabled after that handler: ambiguous, so not learned): the trampoline
 * when signal.getsignal(SIGBUS) reports a Python callable, as before. */
static int trampoline_by_fatal_signals(void (*fn)(int))
{
    static const int fatal[] = {SIGSEGV, SIGFPE, SIGABRT, SIGILL};
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) {
        struct sigaction other;
        int py;
        if (sigaction(fatal[i], NULL, &other) != 0 || (other.sa_flags & SA_SIGINFO) || other.sa_handler != fn)
            continue;
        if ((py = python_handler(fatal[i])) <= 0)
            return py;   /* fn is on a fatal signal Python does not handle: faulthandler's */
    }
    return python_handler(SIGBUS);
}

/* 1 if the handler in *cur is Python's trampoline for a Python SIGBUS function (install
 * over it), 0 if it is some other function (leave it), -1 with an exception. */
static int is_python_trampoline(const struct sigaction *cur)
{
    if (cur->sa_flags & SA_SIGINFO)
        return 0;
    if (learn_trampoline() < 0)
        return -1;
    if (mb_py_trampoline != NULL)
        return cur->sa_handler == mb_py_trampoline;
    return trampoline_by_fatal_signals(cur->sa_handler);
}

/* _guard.h.  Also remembers signal.getsignal(SIGBUS) for mb_guard_check. */
int mb_guard_install(void)
{
    if (mb_guard_arm() < 0)
        return -1;
    return remember_seen();
}

static int mb_guard_arm(void)
{
    struct sigaction act, cur;
    if (mb_bus_installed) {
        /* Installed before: put it back only if the default action replaced it (what
         * faulthandler.disable() or signal.signal(SIGBUS, SIG_DFL) leave when they ran
         * after it).  Another function there (faulthandler enabled after it) chains to
         * this handler already: installing over it would make each chain to the other. */
        if (sigaction(SIGBUS, NULL, &cur) != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == mb_bus_handler)
            return 0;
        if ((cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL) {
            /* Issue 29 item 7: a Python-level handler (signal.signal(SIGBUS, fn)) only sets
             * a flag and returns, so a fault inside a guarded section would repeat forever.
             * Install over it and chain to it (faults outside the guard reach it as before).
             * Any other function there (faulthandler) chains to this handler already:
             * installing over it would make each chain to the other. */
            int py = is_python_trampoline(&cur);
            if (py < 0)
                return -1;
            if (!py)
                return 0;
        }
    }
    memset(&act, 0, sizeof act);
    act.sa_sigaction = mb_bus_handler;
    act.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    if (sigaction(SIGBUS, &act, &mb_prev_bus) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    mb_bus_installed = 1;
    return 0;
}
#else
int mb_guard_install(void)
{
    return 0;
}
#endif

/* body(ctx) in one guarded section over [base, base + len) (interface in _guard.h). */
int mb_guard_run(const void *base, size_t len, void (*body)(void *), void *ctx)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, base, len)
        return -1;
    body(ctx);
    GUARD_END();
    return 0;
}
