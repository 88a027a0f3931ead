/* mmapbloom/_guard.h: the SIGBUS guard around every touch of a mapping, and the items word.
 *
 * A page of a shared mapping past the end of its file (another program truncated the file
 * under the open handle) kills the process with SIGBUS at the first touch.  Every touch of
 * the mapping by a Handle method runs inside a guarded section instead:
 *
 *   - one process-wide SIGBUS handler (sigaction, SA_SIGINFO | SA_NODEFER | SA_ONSTACK),
 *     installed once, by the first Handle made, chaining to the handler it replaced (the
 *     default action, or Python's faulthandler, which pytest enables);
 *   - a thread-local pointer to the calling thread's active guard: a sigjmp_buf and the
 *     mapping's address range, set by GUARD_BEGIN (sigsetjmp(env, 0): no system call, no
 *     signal mask saved) and cleared by GUARD_END;
 *   - on a fault (si_code > 0) inside the active guard's range (or second range: a section
 *     over two mappings, GUARD_BEGIN2), the handler records the address, clears the
 *     guard and siglongjmps back to GUARD_BEGIN, which then answers "faulted"; the caller
 *     releases what the normal path releases (the thread lock and flock) and raises
 *     LengthMismatchError through the filter's `faulted` hook.  Any other SIGBUS (no guard in
 *     this thread, an address outside the guarded mapping) goes to the previous handler,
 *     or, for the default action, restores it and lets the fault repeat: the crash is the
 *     one the process would have had without the guard.
 *
 * A guarded section calls no Python API and allocates nothing, so the jump never skips
 * interpreter or allocator state; it only reads and writes the cells and the items word,
 * and (_mutex.c) locks or unlocks the side file's mutex.  Every guarded section is a
 * function of its own (mb_guard_run and the g_* helpers of _handle.c, _handle_batch.c,
 * _handle_multi.c, _scans.c, _cuckoo_handle.c, _mutex.c): no local of the caller lives
 * across the sigsetjmp.  SA_NODEFER keeps SIGBUS unblocked after the jump
 * (sigsetjmp(env, 0) restores no mask).  A SIGBUS *sent* (kill, raise: si_code <= 0)
 * while this thread is guarded is ignored: it is faulthandler re-raising a guarded fault
 * that it saw first (it was installed after this handler); the fault repeats and lands
 * here.  Windows: no guard (no SIGBUS there).
 *
 * The items word: the header's 4-byte item count, read and written with one aligned
 * access (mb_items_load / mb_items_store). */
#ifndef MMAPBLOOM_GUARD_H
#define MMAPBLOOM_GUARD_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_ITEMS 0xFFFFFFFFu

/* One aligned 4-byte load / store (format.items_word explains why), little-endian. */
static inline uint32_t mb_items_load(const uint8_t *p)
{
    uint32_t v;
#if defined(__GNUC__) || defined(__clang__)
    if (((uintptr_t)p & 3) == 0)
        v = __atomic_load_n((const uint32_t *)(const void *)p, __ATOMIC_RELAXED);
    else
        memcpy(&v, p, 4);
#else
    memcpy(&v, p, 4);
#endif
#if !PY_LITTLE_ENDIAN
    v = (v >> 24) | ((v >> 8) & 0xFF00u) | ((v << 8) & 0xFF0000u) | (v << 24);
#endif
    return v;
}

static inline void mb_items_store(uint8_t *p, uint32_t v)
{
#if !PY_LITTLE_ENDIAN
    v = (v >> 24) | ((v >> 8) & 0xFF00u) | ((v << 8) & 0xFF0000u) | (v << 24);
#endif
#if defined(__GNUC__) || defined(__clang__)
    if (((uintptr_t)p & 3) == 0)
        __atomic_store_n((uint32_t *)(void *)p, v, __ATOMIC_RELAXED);
    else
        memcpy(p, &v, 4);
#else
    memcpy(p, &v, 4);
#endif
}

/* Install the process-wide SIGBUS handler (the first call; the caller holds the GIL), and
 * re-install it when a later call finds the default action back in its place.  Called by
 * every Handle made and every scan: one sigaction query each.  -1 with OSError. */
int mb_guard_install(void);

/* Issue 29 item 7: a Python-level handler installed by signal.signal(SIGBUS, fn) AFTER the
 * guard replaces it (Python's C handler only sets a flag and returns, so a fault inside a
 * guarded section would repeat forever).  Every per-item op (and batch chunk) calls
 * mb_guard_check with the GIL held, just before its guarded section: it asks
 * _signal.getsignal for SIGBUS through its C function (no system call: it reads the
 * interpreter's handler table, about 20 instructions) and compares the answer with the one
 * remembered when the guard was last armed; only a change (signal.signal(SIGBUS, ...) ran
 * since) costs the sigaction query of mb_guard_install, which installs over the Python
 * handler and chains to it.  While the remembered handler is a Python function, every check
 * also makes that sigaction query (mb_bus_python): the same function set again, or put back
 * by faulthandler.disable(), changes nothing getsignal shows.  Not seen by this check: a
 * handler installed by C code (sigaction) over the default action or over the guard.  0, or -1 with an exception. */
#if !defined(_WIN32) && (defined(__GNUC__) || defined(__clang__))
extern PyCFunction mb_getsignal_fn;
extern PyObject *mb_getsignal_self, *mb_sigbus_num, *mb_bus_seen;
extern int mb_bus_python;
PyObject *mb_guard_getsignal_slow(void);
static inline int mb_guard_check(void)
{
    PyObject *cur = mb_getsignal_fn != NULL ? mb_getsignal_fn(mb_getsignal_self, mb_sigbus_num)
                                            : mb_guard_getsignal_slow();
    if (cur == NULL)
        return -1;
    Py_DECREF(cur);   /* the identity is compared only: mb_bus_seen holds its own reference */
    if (cur != mb_bus_seen)
        return mb_guard_install();
    /* A Python handler is remembered: Python's trampoline may be back under the same object
     * (set again, or put back by faulthandler.disable()): one sigaction query re-arms over it.
     * Only processes with a Python SIGBUS handler pay it (issue 29 item 7). */
    return mb_bus_python ? mb_guard_install() : 0;
}
#else
static inline int mb_guard_check(void)
{
    return 0;
}
#endif

/* Before a guarded section over `keys` keys (1 for a per-item op), with the GIL held:
 * mb_guard_check, or for a batch chunk of MB_GUARD_QUERY_KEYS keys or more mb_guard_install
 * (one sigaction query, under 0.1 ns a key), which also sees what mb_guard_check cannot.
 * Every entry point of a handle that touches a mapping calls it.  0, or -1 with an
 * exception. */
#define MB_GUARD_QUERY_KEYS 4096
static inline int mb_guard_rearm(Py_ssize_t keys)
{
    return keys >= MB_GUARD_QUERY_KEYS ? mb_guard_install() : mb_guard_check();
}

#if !defined(_WIN32) && (defined(__GNUC__) || defined(__clang__))
#define MB_GUARD 1
#include <setjmp.h>
#include <signal.h>

typedef struct {
    sigjmp_buf env;
    const uint8_t *lo, *hi;     /* the guarded mapping [lo, hi) */
    const uint8_t *lo2, *hi2;   /* a second one (GUARD_BEGIN2), else both NULL */
    const uint8_t *volatile fault;   /* set by the handler: the faulting address */
} mb_guard;

/* glibc: initial-exec, a plain thread-pointer-relative access with no __tls_get_addr
 * (which allocates a dlopen'ed module's block lazily, so must not run in a signal
 * handler; glibc keeps static TLS room for such modules).  Elsewhere (musl allocates every
 * block up front and refuses initial-exec in dlopen'ed modules; macOS) the default model. */
#if defined(__GLIBC__)
#define MB_TLS_MODEL __attribute__((tls_model("initial-exec")))
#else
#define MB_TLS_MODEL
#endif
extern __thread mb_guard *volatile mb_active MB_TLS_MODEL;   /* this thread's active guard */

/* Open a guarded section over [lo, lo + len) in a g_* helper: the statement after it runs
 * when the mapping faulted inside the section (the guard is cleared then).  mb_active is
 * volatile and fenced: the compiler must neither drop the store (the section's body does
 * not read it) nor move a touch of the mapping outside the section. */
#define GUARD_BEGIN(gd, base, len)                              \
    (gd).lo = (const uint8_t *)(base);                          \
    (gd).hi = (gd).lo + (len);                                  \
    (gd).lo2 = (gd).hi2 = NULL;                                 \
    GUARD_ARM(gd)
/* The same over two mappings, [base, base + len) and [base2, base2 + len2) (one sigsetjmp
 * for a write and the lock around it: mb_mutex_run); after a fault GUARD_FAULTED_IN tells
 * which one faulted. */
#define GUARD_BEGIN2(gd, base, len, base2, len2)                \
    (gd).lo = (const uint8_t *)(base);                          \
    (gd).hi = (gd).lo + (len);                                  \
    (gd).lo2 = (const uint8_t *)(base2);                        \
    (gd).hi2 = (gd).lo2 + (len2);                               \
    GUARD_ARM(gd)
#define GUARD_ARM(gd)                                           \
    if (sigsetjmp((gd).env, 0) == 0) {                          \
        mb_active = &(gd);                                      \
        __atomic_signal_fence(__ATOMIC_SEQ_CST);                \
    } else
#define GUARD_FAULTED_IN(gd, base, len) \
    ((gd).fault >= (const uint8_t *)(base) && (gd).fault < (const uint8_t *)(base) + (len))
/* The fences keep every touch of the mapping between the two stores (a compiler barrier:
 * the handler runs in the same thread). */
#define GUARD_END() (__atomic_signal_fence(__ATOMIC_SEQ_CST), mb_active = NULL)
#define GUARD_DECL(gd) mb_guard gd
/* GCC's -Wclobbered flags the guarded helpers' parameters and locals as "might be
 * clobbered by longjmp": after the jump a helper reads none of them but parameters it never
 * assigns and the guard's volatile fault field (it only returns), so no value it reads is
 * indeterminate there (C11 7.13.2.1).  The only functions here that call sigsetjmp are
 * those helpers (mb_guard_run, the g_* functions). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wclobbered"
#endif
#else
#define GUARD_BEGIN(gd, base, len) if (0)
#define GUARD_BEGIN2(gd, base, len, base2, len2) if (0)
#define GUARD_FAULTED_IN(gd, base, len) 0
#define GUARD_END() ((void)0)
#define GUARD_DECL(gd) int gd = 0; (void)gd
#endif

/* body(ctx) in one guarded section over [base, base + len) of its own: body touches only
 * that range, calls no Python API and allocates nothing.  0, or -1: the range faulted and
 * body stopped there. */
int mb_guard_run(const void *base, size_t len, void (*body)(void *), void *ctx);

#endif /* MMAPBLOOM_GUARD_H */
