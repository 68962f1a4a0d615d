/* The per-frame arithmetic of the joint-state estimator, the PID and the reference's preview,
 * compiled.
 *
 * Each function here is the Python function of the same name (estimation.hinge_angles,
 * estimation.filter_update, pid.pid_law, reference.waypoint_preview) written in C with the same
 * operations in the same order, so it returns the same bits: the Python functions are the
 * reference, and tests/control/test_kernels.py compares the two on random and recorded inputs. Why C: at
 * 120 Hz every frame runs from cold caches, where interpreted arithmetic costs several times
 * its warm cost (docs/benchmarks.md, issue 30).
 *
 * What keeps the bits equal:
 * - built with -ffp-contract=off: no fused multiply-add where Python rounds twice; and with
 *   -fno-builtin-pow: the C library's pow, as Python's float ** calls it (GCC would turn
 *   pow(x, 2.0) into x * x, one ulp off now and then);
 * - sin, cos, atan2, sqrt and pow from the C library, as Python's math module and float pow
 *   call them, with Python's errors (a domain error, an overflow, a division by zero);
 * - hypot by calling Python's math.hypot, which does not use the C library's;
 * - min/max as Python's builtins order their arguments (NaN included), % as Python's float %,
 *   // as Python's float // (which numpy's floor_divide also is).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

static PyObject *math_hypot; /* math.hypot, looked up at import */

/* ---- Python's semantics on doubles ----------------------------------------------------- */

static inline double py_max(double a, double b) { return b > a ? b : a; }
static inline double py_min(double a, double b) { return b < a ? b : a; }

static inline double py_sign(double x) /* pid._sign */
{
    return x > 0 ? 1.0 : (x < 0 ? -1.0 : (x == 0 ? 0.0 : NAN));
}

static double py_mod(double v, double w) /* float %, w != 0 */
{
    double mod = fmod(v, w);
    if (mod) {
        if ((w < 0) != (mod < 0))
            mod += w;
    } else {
        mod = copysign(0.0, w);
    }
    return mod;
}

static int domain_error(void)
{
    PyErr_SetString(PyExc_ValueError, "math domain error");
    return -1;
}

static int zero_division(void)
{
    PyErr_SetString(PyExc_ZeroDivisionError, "float division by zero");
    return -1;
}

/* math.sin / math.cos: a NaN from a number (an infinity) is a domain error */
static int m_sin(double x, double *out)
{
    *out = sin(x);
    return (isnan(*out) && !isnan(x)) ? domain_error() : 0;
}

static int m_cos(double x, double *out)
{
    *out = cos(x);
    return (isnan(*out) && !isnan(x)) ? domain_error() : 0;
}

static int m_sqrt(double x, double *out)
{
    *out = sqrt(x);
    return (isnan(*out) && !isnan(x)) ? domain_error() : 0;
}

/* x ** n for a positive whole n, as float pow: an infinity from a finite x is an overflow */
static int m_pow(double x, double n, double *out)
{
    *out = pow(x, n);
    if (isinf(*out) && isfinite(x)) {
        PyErr_SetString(PyExc_OverflowError, "(34, 'Numerical result out of range')");
        return -1;
    }
    return 0;
}

static int m_hypot(double x, double y, double *out)
{
    PyObject *args[2] = {PyFloat_FromDouble(x), PyFloat_FromDouble(y)};
    PyObject *r = NULL;
    if (args[0] && args[1])
        r = PyObject_Vectorcall(math_hypot, args, 2, NULL);
    Py_XDECREF(args[0]);
    Py_XDECREF(args[1]);
    if (!r)
        return -1;
    *out = PyFloat_AsDouble(r);
    Py_DECREF(r);
    return 0;
}

static inline int divide(double a, double b, double *out)
{
    if (b == 0.0)
        return zero_division();
    *out = a / b;
    return 0;
}

/* float(o) */
static int as_double(PyObject *o, double *out)
{
    if (PyFloat_CheckExact(o)) {
        *out = PyFloat_AS_DOUBLE(o);
        return 0;
    }
    PyObject *f = PyNumber_Float(o);
    if (!f)
        return -1;
    *out = PyFloat_AS_DOUBLE(f);
    Py_DECREF(f);
    return 0;
}

/* ---- estimation ------------------------------------------------------------------------ */

typedef struct {
    double x, y, z;
} vec3;

typedef struct {
    double x, y, z, w;
} quat;

static inline vec3 cross(vec3 a, vec3 b)
{
    vec3 r = {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
    return r;
}

static inline double dot(vec3 a, vec3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }

/* estimation._rotate */
static vec3 rotate(quat q, vec3 v, int inverse)
{
    double ux = inverse ? -q.x : q.x, uy = inverse ? -q.y : q.y, uz = inverse ? -q.z : q.z;
    double tx = 2 * (uy * v.z - uz * v.y), ty = 2 * (uz * v.x - ux * v.z),
           tz = 2 * (ux * v.y - uy * v.x);
    double w = q.w;
    vec3 r = {v.x + w * tx + (uy * tz - uz * ty), v.y + w * ty + (uz * tx - ux * tz),
              v.z + w * tz + (ux * ty - uy * tx)};
    return r;
}

/* `x, y, z, w = map(float, quat)` */
static int read_quat(PyObject *q, double v[4])
{
    PyObject *seq = PySequence_Fast(q, "a pose's orientation must be (x, y, z, w)");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = 0;
    double fifth; /* unpacking converts one value more than it takes before it fails */
    for (Py_ssize_t i = 0; i < n && i < 5 && rc == 0; i++)
        rc = as_double(PySequence_Fast_GET_ITEM(seq, i), i < 4 ? &v[i] : &fifth);
    if (rc == 0 && n != 4) {
        PyErr_Format(PyExc_ValueError, n < 4 ? "not enough values to unpack (expected 4, got %zd)"
                                             : "too many values to unpack (expected 4)",
                     n);
        rc = -1;
    }
    Py_DECREF(seq);
    return rc;
}

/* estimation.pose_is_valid; 1 valid, 0 not, -1 error. The orientation in `q` (not normalised). */
static int pose_valid(PyObject *pose, double q[4])
{
    PyObject *pair = PySequence_Fast(pose, "a pose must be (position, orientation)");
    if (!pair)
        return -1;
    if (PySequence_Fast_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_ValueError, "a pose must be (position, orientation)");
        Py_DECREF(pair);
        return -1;
    }
    PyObject *position = PySequence_Fast_GET_ITEM(pair, 0);
    int valid = -1;
    if (read_quat(PySequence_Fast_GET_ITEM(pair, 1), q) == 0) {
        PyObject *pos = PySequence_Fast(position, "a pose's position must be a sequence");
        if (pos) {
            valid = 1;
            for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(pos); i++) {
                double c;
                if (as_double(PySequence_Fast_GET_ITEM(pos, i), &c) < 0) {
                    valid = -1;
                    break;
                }
                if (!isfinite(c)) {
                    valid = 0;
                    break;
                }
            }
            Py_DECREF(pos);
        }
    }
    Py_DECREF(pair);
    if (valid != 1)
        return valid;
    if (!(isfinite(q[0]) && isfinite(q[1]) && isfinite(q[2]) && isfinite(q[3])))
        return 0;
    return q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3] > 1e-9;
}

/* estimation._unit_quat of a valid pose's orientation */
static int unit_quat(const double v[4], quat *out)
{
    double n;
    if (m_sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2] + v[3] * v[3], &n) < 0)
        return -1;
    if (!(n > 1e-9)) {
        PyErr_SetString(PyExc_ValueError, "zero or non-finite quaternion");
        return -1;
    }
    out->x = v[0] / n;
    out->y = v[1] / n;
    out->z = v[2] / n;
    out->w = v[3] / n;
    return 0;
}

#define HINGE_FIELDS 12 /* parent, child, axis_parent (3), ref_parent (3), ref_child (3), offset */

PyDoc_STRVAR(hinge_angles_doc,
             "hinge_angles(poses, n_bodies, hinges) -> list[float] | None\n\n"
             "estimation.hinge_angles, compiled.");

static PyObject *hinge_angles(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "hinge_angles takes (poses, n_bodies, hinges)");
        return NULL;
    }
    Py_ssize_t n_bodies = PyLong_AsSsize_t(args[1]);
    if (n_bodies == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyObject_Length(args[0]);
    if (n < 0)
        return NULL;
    if (n != n_bodies)
        Py_RETURN_NONE;
    PyObject *poses = PySequence_Fast(args[0], "poses must be a sequence");
    if (!poses)
        return NULL;
    PyObject *hinges = PySequence_Fast(args[2], "hinges must be a sequence");
    if (!hinges) {
        Py_DECREF(poses);
        return NULL;
    }
    PyObject *result = NULL;
    double(*raw)[4] = PyMem_Malloc(sizeof(double[4]) * (size_t)(n ? n : 1));
    quat *quats = PyMem_Malloc(sizeof(quat) * (size_t)(n ? n : 1));
    if (!raw || !quats) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int v = pose_valid(PySequence_Fast_GET_ITEM(poses, i), raw[i]);
        if (v < 0)
            goto done;
        if (v == 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (unit_quat(raw[i], &quats[i]) < 0)
            goto done;
    Py_ssize_t nh = PySequence_Fast_GET_SIZE(hinges);
    PyObject *angles = PyList_New(nh);
    if (!angles)
        goto done;
    for (Py_ssize_t j = 0; j < nh; j++) {
        PyObject *h = PySequence_Fast(PySequence_Fast_GET_ITEM(hinges, j), "a hinge");
        if (!h)
            goto fail;
        double f[HINGE_FIELDS];
        Py_ssize_t a = -1, b = -1;
        int bad = PySequence_Fast_GET_SIZE(h) != HINGE_FIELDS;
        if (!bad) {
            a = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(h, 0));
            b = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(h, 1));
            for (int k = 2; k < HINGE_FIELDS && !PyErr_Occurred(); k++)
                as_double(PySequence_Fast_GET_ITEM(h, k), &f[k]);
        }
        Py_DECREF(h);
        if (PyErr_Occurred())
            goto fail;
        if (bad || a < 0 || b < 0 || a >= n || b >= n) {
            PyErr_SetString(PyExc_IndexError, "a hinge's bodies are not among the poses");
            goto fail;
        }
        vec3 ap = {f[2], f[3], f[4]}, rp = {f[5], f[6], f[7]}, rc = {f[8], f[9], f[10]};
        vec3 v = rotate(quats[a], rotate(quats[b], rc, 0), 1);
        PyObject *angle = PyFloat_FromDouble(atan2(dot(ap, cross(rp, v)), dot(rp, v)) + f[11]);
        if (!angle)
            goto fail;
        PyList_SET_ITEM(angles, j, angle);
    }
    result = angles;
    goto done;
fail:
    Py_DECREF(angles);
done:
    PyMem_Free(raw);
    PyMem_Free(quats);
    Py_DECREF(poses);
    Py_DECREF(hinges);
    return result;
}

/* item i of a sequence as a double, with the sequence's length checked by the caller */
static int item_double(PyObject *seq, Py_ssize_t i, double *out)
{
    PyObject *o = PySequence_GetItem(seq, i);
    if (!o)
        return -1;
    int rc = as_double(o, out);
    Py_DECREF(o);
    return rc;
}

static int check_len(PyObject *seq, Py_ssize_t want, const char *what)
{
    Py_ssize_t n = PyObject_Length(seq);
    if (n < 0)
        return -1;
    if (n != want) {
        PyErr_Format(PyExc_ValueError, "%s: %zd values, expected %zd", what, n, want);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(filter_update_doc,
             "filter_update(x, P, z, dt, sigma_acc, sigma_meas) -> (x, P)\n\n"
             "estimation.filter_update, compiled.");

static PyObject *filter_update(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "filter_update takes (x, P, z, dt, sigma_acc, sigma_meas)");
        return NULL;
    }
    PyObject *xs = args[0], *Ps = args[1], *zs = args[2];
    Py_ssize_t n = PyObject_Length(xs);
    if (n < 0)
        return NULL;
    if (check_len(zs, n, "filter_update: z against x") < 0)
        return NULL;
    double dt, sigma_acc, sigma_meas;
    if (as_double(args[3], &dt) < 0 || as_double(args[4], &sigma_acc) < 0 ||
        as_double(args[5], &sigma_meas) < 0)
        return NULL;
    double *st = PyMem_Malloc(sizeof(double) * 6 * (size_t)(n ? n : 1)); /* a, v, z, p00..p11 */
    if (!st)
        return PyErr_NoMemory();
    PyObject *x_out = NULL, *P_out = NULL, *result = NULL;
    /* the unwrap: each angle within pi of the filter's */
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *xj = PySequence_GetItem(xs, j);
        if (!xj)
            goto done;
        int rc = check_len(xj, 2, "filter_update: x[j]");
        if (rc == 0)
            rc = item_double(xj, 0, &st[6 * j]);
        if (rc == 0)
            rc = item_double(xj, 1, &st[6 * j + 1]);
        Py_DECREF(xj);
        double w;
        if (rc < 0 || item_double(zs, j, &w) < 0)
            goto done;
        double a = st[6 * j];
        st[6 * j + 2] = a + py_mod(w - a + M_PI, 2 * M_PI) - M_PI;
    }
    double qa, d4, d3, d2, R;
    if (m_pow(sigma_acc, 2.0, &qa) < 0 || m_pow(dt, 4.0, &d4) < 0 || m_pow(dt, 3.0, &d3) < 0 ||
        m_pow(dt, 2.0, &d2) < 0 || m_pow(sigma_meas, 2.0, &R) < 0)
        goto done;
    double q00 = qa * d4 / 4, q01 = qa * d3 / 2, q11 = qa * d2;
    if (check_len(Ps, n, "filter_update: P against x") < 0)
        goto done;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *Pj = PySequence_GetItem(Ps, j);
        if (!Pj)
            goto done;
        int rc = check_len(Pj, 3, "filter_update: P[j]");
        for (int k = 0; k < 3 && rc == 0; k++)
            rc = item_double(Pj, k, &st[6 * j + 3 + k]);
        Py_DECREF(Pj);
        if (rc < 0)
            goto done;
    }
    x_out = PyList_New(n);
    P_out = PyList_New(n);
    if (!x_out || !P_out)
        goto done;
    for (Py_ssize_t j = 0; j < n; j++) {
        double *s = &st[6 * j];
        double a = s[0], v = s[1], z = s[2], p00 = s[3], p01 = s[4], p11 = s[5];
        a += dt * v;
        double n00 = p00 + 2 * dt * p01 + dt * dt * p11 + q00;
        double n01 = p01 + dt * p11 + q01;
        double n11 = p11 + q11;
        double sum = n00 + R, k0, k1;
        if (divide(n00, sum, &k0) < 0 || divide(n01, sum, &k1) < 0)
            goto done;
        double r = z - a;
        PyObject *xj = Py_BuildValue("[dd]", a + k0 * r, v + k1 * r);
        if (!xj)
            goto done;
        PyList_SET_ITEM(x_out, j, xj);
        PyObject *Pj = Py_BuildValue("(ddd)", n00 - k0 * n00, n01 - k0 * n01, n11 - k1 * n01);
        if (!Pj)
            goto done;
        PyList_SET_ITEM(P_out, j, Pj);
    }
    result = PyTuple_Pack(2, x_out, P_out);
done:
    Py_XDECREF(x_out);
    Py_XDECREF(P_out);
    PyMem_Free(st);
    return result;
}

/* ---- the PID law ----------------------------------------------------------------------- */

/* pid.pack_statics: the order of the statics tuple */
enum {
    BETA1, BETA2, A1, B1, B2, D1, D2, M_THIGH, M_CALF, COM_THIGH_H, COM_THIGH_V, COM_CALF_H,
    COM_CALF_V, M_ACT0, M_ACT1, K0, K1, L00, L01, S0, S1, AREA_SLOPE0, AREA_SLOPE1, GRAVITY,
    PRESSURE_SIGN, N_STATICS
};

/* kinematics.actuation_lengths_jacobian */
static int lengths_jacobian(const double *p, double t1, double t2, double l[2], double J[2][2])
{
    double c1, s1, ck, sk, c2, s2;
    if (m_cos(t1 - p[BETA1], &c1) < 0 || m_sin(t1 - p[BETA1], &s1) < 0 || m_cos(t1, &ck) < 0 ||
        m_sin(t1, &sk) < 0 || m_cos(t1 + t2 + p[BETA2], &c2) < 0 ||
        m_sin(t1 + t2 + p[BETA2], &s2) < 0)
        return -1;
    double b1 = p[B1], a1 = p[A1], b2 = p[B2];
    double r0 = b1 * c1 - p[D1], r1 = b1 * s1 - 0.0;
    if (m_hypot(r0, r1, &l[0]) < 0 || divide(r0 * (-b1 * s1) + r1 * (b1 * c1), l[0], &J[0][0]) < 0 ||
        divide(r0 * 0.0 + r1 * 0.0, l[0], &J[0][1]) < 0)
        return -1;
    double d20 = -b2 * s2, d21 = b2 * c2;
    r0 = (a1 * ck + b2 * c2) - -p[D2];
    r1 = (a1 * sk + b2 * s2) - 0.0;
    if (m_hypot(r0, r1, &l[1]) < 0 ||
        divide(r0 * (-a1 * sk + d20) + r1 * (a1 * ck + d21), l[1], &J[1][0]) < 0 ||
        divide(r0 * d20 + r1 * d21, l[1], &J[1][1]) < 0)
        return -1;
    return 0;
}

/* statics.holding_pressures_floats (through _holding and _gravity_floats) */
static int holding_pressures(const double *p, double t1, double t2, double h[2])
{
    double l[2], J[2][2];
    if (lengths_jacobian(p, t1, t2, l, J) < 0)
        return -1;
    double a12 = t1 + t2, s1, c1, s12, c12, sC, cC, sD, cD;
    if (m_sin(t1, &s1) < 0 || m_cos(t1, &c1) < 0 || m_sin(a12, &s12) < 0 ||
        m_cos(a12, &c12) < 0 || m_sin(t1 - p[BETA1], &sC) < 0 || m_cos(t1 - p[BETA1], &cC) < 0 ||
        m_sin(a12 + p[BETA2], &sD) < 0 || m_cos(a12 + p[BETA2], &cD) < 0)
        return -1;
    double dy_thigh = p[COM_THIGH_H] * c1 - p[COM_THIGH_V] * s1;
    double dy_cc = p[COM_CALF_H] * c12 - p[COM_CALF_V] * s12;
    double dy_knee = p[A1] * c1, dy_C = p[B1] * cC, dy_Dc = p[B2] * cD;
    double ma = 0.5 * p[M_ACT0], mb = 0.5 * p[M_ACT1];
    double dU1 = p[M_THIGH] * dy_thigh + p[M_CALF] * (dy_knee + dy_cc) + ma * dy_C +
                 mb * (dy_knee + dy_Dc);
    double dU2 = p[M_CALF] * dy_cc + mb * dy_Dc;
    double b0 = p[GRAVITY] * dU1, b1 = p[GRAVITY] * dU2;
    double j00 = J[0][0], j01 = J[0][1], j10 = J[1][0], j11 = J[1][1];
    double det = j00 * j11 - j10 * j01, x0, x1;
    if (divide(b0 * j11 - j10 * b1, det, &x0) < 0 || divide(j00 * b1 - j01 * b0, det, &x1) < 0)
        return -1;
    double f0 = p[K0] * (l[0] - p[L00]) - x0, f1 = p[K1] * (l[1] - p[L01]) - x1;
    double area0 = p[S0] * (1.0 + p[AREA_SLOPE0] * (l[0] - p[L00]));
    double area1 = p[S1] * (1.0 + p[AREA_SLOPE1] * (l[1] - p[L01]));
    double s = p[PRESSURE_SIGN];
    if (divide(s * f0, area0, &h[0]) < 0 || divide(s * f1, area1, &h[1]) < 0)
        return -1;
    h[0] = h[0] / 1e3;
    h[1] = h[1] / 1e3;
    return 0;
}

static inline int isclose(double a, double b) { return fabs(a - b) <= 1e-8 + 1e-5 * fabs(b); }

/* pid.box_lsq_floats with the box [lo, hi]²; 0, or -1 with AssertionError (non-finite data) */
static int box_lsq(const double A[2][2], const double b[2], double lo, double hi, double x[2],
                   int sat[2])
{
    double a00 = A[0][0], a01 = A[0][1], a10 = A[1][0], a11 = A[1][1], b0 = b[0], b1 = b[1];
    double cols[2][2] = {{a00, a10}, {a01, a11}};
    double det = a00 * a11 - a01 * a10;
    if (det != 0.0) {
        double u = (b0 * a11 - a01 * b1) / det, v = (a00 * b1 - a10 * b0) / det;
        if (lo <= u && u <= hi && lo <= v && v <= hi) {
            x[0] = u;
            x[1] = v;
            sat[0] = sat[1] = 0;
            return 0;
        }
    }
    /* itertools.product((0, 1, 2), repeat=2) without (0, 0): free (0), at lo (1), at hi (2) */
    static const int patterns[8][2] = {{0, 1}, {0, 2}, {1, 0}, {1, 1},
                                       {1, 2}, {2, 0}, {2, 1}, {2, 2}};
    int found = 0;
    double best[2] = {0.0, 0.0}, best_cost = INFINITY;
    for (int k = 0; k < 8; k++) {
        int im = patterns[k][0], jm = patterns[k][1];
        double xb[2] = {im == 1 ? lo : hi, jm == 1 ? lo : hi};
        int free = im == 0 ? 0 : (jm == 0 ? 1 : -1);
        if (free >= 0) {
            int j = 1 - free;
            const double *a = cols[free], *c = cols[j];
            double den = a[0] * a[0] + a[1] * a[1];
            if (den <= 0)
                continue;
            double xi = (a[0] * (b0 - c[0] * xb[j]) + a[1] * (b1 - c[1] * xb[j])) / den;
            if (xi < lo - 1e-12 || xi > hi + 1e-12)
                continue;
            xb[free] = xi;
        }
        double r0 = a00 * xb[0] + a01 * xb[1] - b0;
        double r1 = a10 * xb[0] + a11 * xb[1] - b1;
        double cost = r0 * r0 + r1 * r1;
        if (cost < best_cost - 1e-15) {
            best[0] = xb[0];
            best[1] = xb[1];
            best_cost = cost;
            found = 1;
        }
    }
    if (!found) {
        PyErr_SetString(PyExc_AssertionError, "box_lsq: non-finite problem data");
        return -1;
    }
    x[0] = best[0];
    x[1] = best[1];
    for (int i = 0; i < 2; i++)
        sat[i] = isclose(best[i], lo) || isclose(best[i], hi);
    return 0;
}

/* pid.anti_windup */
static double anti_windup(double integral, double terr, double push, double k_aw, double dt,
                          double i_max)
{
    double s_err = py_sign(terr);
    int short_ = fabs(terr) > 1e-9 && s_err != py_sign(push);
    double di = short_ ? 0.0 : push;
    double s_int = py_sign(integral);
    double bleed =
        (short_ && s_err == -s_int) ? py_min(k_aw * fabs(terr) * dt, fabs(integral)) : 0.0;
    double out = integral + (dt * di - s_int * bleed);
    return py_min(py_max(out, -i_max), i_max);
}

enum {
    STATICS, Q0, Q1, QD0, QD1, R0, R1, RD0, RD1, KP0, KP1, KI0, KI1, KD0, KD1, K_AW, I_MAX0,
    I_MAX1, I0, I1, DT, P_MAX, N_PID_ARGS
};

PyDoc_STRVAR(pid_law_doc,
             "pid_law(statics, q0, q1, qd0, qd1, r0, r1, rd0, rd1, kp0, kp1, ki0, ki1, kd0, "
             "kd1, k_aw, i_max0, i_max1, i0, i1, dt, p_max)\n"
             "-> (p0, p1, sat0, sat1, err0, err1, ff0, ff1, i0, i1)\n\n"
             "pid.pid_law, compiled; `statics` is pid.pack_statics(params).");

static PyObject *pid_law(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != N_PID_ARGS) {
        PyErr_Format(PyExc_TypeError, "pid_law takes %d arguments (%zd given)", N_PID_ARGS,
                     nargs);
        return NULL;
    }
    double p[N_STATICS], v[N_PID_ARGS];
    PyObject *statics = args[STATICS];
    if (!PyTuple_Check(statics) || PyTuple_GET_SIZE(statics) != N_STATICS) {
        PyErr_Format(PyExc_TypeError, "pid_law: statics must be pid.pack_statics's %d floats",
                     N_STATICS);
        return NULL;
    }
    for (int i = 0; i < N_STATICS; i++)
        if (as_double(PyTuple_GET_ITEM(statics, i), &p[i]) < 0)
            return NULL;
    for (int i = Q0; i < N_PID_ARGS; i++)
        if (as_double(args[i], &v[i]) < 0)
            return NULL;
    double q0 = v[Q0], q1 = v[Q1], r0 = v[R0], r1 = v[R1], p_max = v[P_MAX];
    double e0 = r0 - q0, e1 = r1 - q1, h[2];
    if (holding_pressures(p, r0, r1, h) < 0)
        return NULL;
    double f0 = py_min(py_max(h[0], 0.0), p_max), f1 = py_min(py_max(h[1], 0.0), p_max);
    double i0 = v[I0], i1 = v[I1];
    double t0 = v[KP0] * e0 + v[KD0] * (v[RD0] - v[QD0]) + i0;
    double t1 = v[KP1] * e1 + v[KD1] * (v[RD1] - v[QD1]) + i1;
    double l[2], J[2][2];
    if (lengths_jacobian(p, q0, q1, l, J) < 0)
        return NULL;
    double sg = p[PRESSURE_SIGN], s0 = p[S0] * 1e3, s1 = p[S1] * 1e3;
    double A[2][2] = {{sg * J[0][0] * s0, sg * J[1][0] * s1}, {sg * J[0][1] * s0, sg * J[1][1] * s1}};
    double b[2] = {(A[0][0] * f0 + A[0][1] * f1) + t0, (A[1][0] * f0 + A[1][1] * f1) + t1};
    double x[2];
    int sat[2];
    if (box_lsq(A, b, 0.0, p_max, x, sat) < 0)
        return NULL;
    double p0 = py_min(py_max(x[0], 0.0), p_max), p1 = py_min(py_max(x[1], 0.0), p_max);
    double err0 = (A[0][0] * p0 + A[0][1] * p1) - b[0];
    double err1 = (A[1][0] * p0 + A[1][1] * p1) - b[1];
    double ni0 = anti_windup(i0, err0, v[KI0] * e0, v[K_AW], v[DT], v[I_MAX0]);
    double ni1 = anti_windup(i1, err1, v[KI1] * e1, v[K_AW], v[DT], v[I_MAX1]);
    return Py_BuildValue("(ddNNdddddd)", p0, p1, PyBool_FromLong(sat[0]), PyBool_FromLong(sat[1]),
                         err0, err1, f0, f1, ni0, ni1);
}

/* ---- the reference's preview ----------------------------------------------------------- */

static double py_floordiv(double v, double w) /* float //, w != 0 (numpy's floor_divide too) */
{
    double mod = fmod(v, w);
    double div = (v - mod) / w;
    if (mod && ((w < 0) != (mod < 0)))
        div -= 1.0;
    if (!div)
        return copysign(0.0, v / w);
    double floordiv = floor(div);
    if (div - floordiv > 0.5)
        floordiv += 1.0;
    return floordiv;
}

static Py_ssize_t py_mod_index(long long k, Py_ssize_t n) /* int %, n > 0 */
{
    long long m = k % n;
    return (Py_ssize_t)(m < 0 ? m + n : m);
}

enum { WP_POSES, WP_MOVE, WP_HOLD, WP_LOOP, WP_T, WP_STAMP, WP_SPACING, WP_COUNT, N_WP_ARGS };

/* reference.MAX_SEGMENTS (tests/control/test_kernels.py): a time's segment number must fit a
 * long long with room to spare */
#define MAX_SEGMENTS 1e15
#define MAX_SEGMENTS_ERROR "waypoint_preview: a time more than 1e15 segments from 0"

PyDoc_STRVAR(waypoint_preview_doc,
             "waypoint_preview(poses, move, hold, loop, t, stamp, spacing, count) -> list[float]\n\n"
             "reference.waypoint_preview, compiled.");

static PyObject *waypoint_preview(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != N_WP_ARGS) {
        PyErr_Format(PyExc_TypeError, "waypoint_preview takes %d arguments (%zd given)",
                     N_WP_ARGS, nargs);
        return NULL;
    }
    double move, hold, t, stamp, spacing;
    if (as_double(args[WP_MOVE], &move) < 0 || as_double(args[WP_HOLD], &hold) < 0 ||
        as_double(args[WP_T], &t) < 0 || as_double(args[WP_STAMP], &stamp) < 0 ||
        as_double(args[WP_SPACING], &spacing) < 0)
        return NULL;
    int loop = PyObject_IsTrue(args[WP_LOOP]);
    if (loop < 0)
        return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[WP_COUNT]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    double seg = move + hold;
    if (count < 0 || !(seg > 0) || !isfinite(seg) || !isfinite(t) || !isfinite(stamp) ||
        !isfinite(spacing)) {
        PyErr_SetString(PyExc_ValueError, "waypoint_preview: finite times, move + hold > 0 and "
                                          "count >= 0");
        return NULL;
    }
    PyObject *poses = PySequence_Fast(args[WP_POSES], "poses must be a sequence");
    if (!poses)
        return NULL;
    PyObject *result = NULL;
    double *P = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(poses), nj = -1;
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "waypoint_preview: no poses");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PySequence_Fast(PySequence_Fast_GET_ITEM(poses, i), "a pose");
        if (!row)
            goto done;
        Py_ssize_t m = PySequence_Fast_GET_SIZE(row);
        if (nj < 0) {
            nj = m;
            P = PyMem_Malloc(sizeof(double) * (size_t)(n * (nj ? nj : 1)));
            if (!P) {
                Py_DECREF(row);
                PyErr_NoMemory();
                goto done;
            }
        }
        if (m != nj) {
            Py_DECREF(row);
            PyErr_SetString(PyExc_ValueError, "waypoint_preview: poses of different lengths");
            goto done;
        }
        for (Py_ssize_t j = 0; j < nj; j++)
            if (as_double(PySequence_Fast_GET_ITEM(row, j), &P[i * nj + j]) < 0) {
                Py_DECREF(row);
                goto done;
            }
        Py_DECREF(row);
    }
    Py_ssize_t cols = 1 + 2 * nj;
    if (count > PY_SSIZE_T_MAX / cols) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *out = PyList_New(count * cols);
    if (!out)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        /* Waypoints.samples at preview_samples' times, one row of column_stack */
        double ti = t + spacing * (double)i;
        double kf = py_floordiv(ti, seg);
        if (!(fabs(kf) < MAX_SEGMENTS)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_ValueError, MAX_SEGMENTS_ERROR);
            goto done;
        }
        double tau = ti - kf * seg;
        long long k = (long long)kf;
        double pos = 1.0, vel = 0.0;
        if (move > 0) {
            double s = py_min(py_max(tau / move, 0.0), 1.0);
            double s2 = s * s, s3 = s2 * s, s4 = s3 * s; /* reference.min_jerk */
            pos = 10 * s3 - 15 * s4 + 6 * (s4 * s);
            double ds = 30 * s2 - 60 * s3 + 30 * s4;
            vel = tau < move ? ds / move : 0.0;
        }
        int last = n > 1 ? (k >= n && !loop) : 1;
        int first = k == 0 && !last;
        const double *a = &P[py_mod_index(k - 1, n) * nj], *b = &P[py_mod_index(k, n) * nj];
        PyObject **row = &PyList_GET_ITEM(out, i * cols);
        for (Py_ssize_t j = 0; j < cols; j++) {
            double x;
            if (j == 0)
                x = stamp + (ti - t);
            else if (j <= nj) {
                Py_ssize_t c = j - 1;
                x = last ? P[(n - 1) * nj + c] : first ? P[c] : a[c] + pos * (b[c] - a[c]);
            } else {
                Py_ssize_t c = j - 1 - nj;
                x = (last || first) ? 0.0 : vel * (b[c] - a[c]);
            }
            PyObject *f = PyFloat_FromDouble(x);
            if (!f) {
                Py_DECREF(out);
                goto done;
            }
            row[j] = f;
        }
    }
    result = out;
done:
    PyMem_Free(P);
    Py_DECREF(poses);
    return result;
}

static PyMethodDef methods[] = {
    {"hinge_angles", (PyCFunction)(void (*)(void))hinge_angles, METH_FASTCALL, hinge_angles_doc},
    {"filter_update", (PyCFunction)(void (*)(void))filter_update, METH_FASTCALL,
     filter_update_doc},
    {"pid_law", (PyCFunction)(void (*)(void))pid_law, METH_FASTCALL, pid_law_doc},
    {"waypoint_preview", (PyCFunction)(void (*)(void))waypoint_preview, METH_FASTCALL,
     waypoint_preview_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "The estimator's, the PID's and the preview's per-frame arithmetic, compiled (see _kernels.c).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__kernels(void)
{
    PyObject *math = PyImport_ImportModule("math");
    if (!math)
        return NULL;
    math_hypot = PyObject_GetAttrString(math, "hypot");
    Py_DECREF(math);
    if (!math_hypot)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "N_STATICS", N_STATICS) < 0 ||
              PyModule_AddObject(m, "MAX_SEGMENTS", PyFloat_FromDouble(MAX_SEGMENTS)) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
