/* Sealing and opening an event body whose envelope is its associated data, in one call each.
 *
 * The pure-Python path (habitus/crypto/sealing.py) does the same work in a dozen calls into C
 * (two searches, five slices, a memo lookup, base64, AES-GCM, a join), and on a consumer that
 * does little else the interpreter's own cost per call is most of what sealing adds. This
 * module does those steps in one call, over the same bytes, with OpenSSL's AES-256-GCM, and
 * answers None wherever the fast path does not apply (a memo miss, a stale entry, an owner at
 * another offset, base64 that is not in canonical form), so that the Python path decides:
 * both paths then open, refuse or fall back on exactly the same bodies.
 *
 * Layout (sealing.py's docstring): ENVELOPE ,"payload":"BASE64" ,"sealed":{"kid":"KID",
 * "alg":"A256GCM","aad":"envelope"}}, where BASE64 is nonce(12) || ciphertext || tag(16) and
 * the associated data is ENVELOPE, every byte before `,"payload":"`.
 *
 * A key is made ready once (`data_key`, `column_key`: a capsule holding keyed OpenSSL contexts,
 * freed with it), and a call then sets only the nonce. The GIL is held throughout, so a
 * context is never used by two calls at once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/random.h>

#define NONCE_BYTES 12
#define TAG_BYTES 16
#define KEY_BYTES 32
#define SIV_KEY_BYTES 64
#define STACK_BLOB 4096

static const char PAYLOAD_MARK[] = ",\"payload\":\"";
static const char FIELD[] = ",\"payload\":";
static const char KID_MARK[] = "\",\"sealed\":{\"kid\":\"";
static const char KID_END[] = "\",\"alg\":\"A256GCM\",\"aad\":\"envelope\"}}";
#define PAYLOAD_MARK_LEN (sizeof(PAYLOAD_MARK) - 1)
#define FIELD_LEN (sizeof(FIELD) - 1)
#define KID_MARK_LEN (sizeof(KID_MARK) - 1)
#define KID_END_LEN (sizeof(KID_END) - 1)
static const char COLUMN_PREFIX[] = "hc1:";
#define COLUMN_PREFIX_LEN 4

/* the ciphers, fetched once; a column value is sealed in one context, copied from its key's */
static const EVP_CIPHER *gcm;
static EVP_CIPHER *siv;
static EVP_CIPHER_CTX *sctx;
static PyObject *SealError;

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
/* a character's six bits already in place for each of a quad's four positions; BAD for a
 * character outside the alphabet (its bit survives the OR of the four) */
#define BAD 0x80000000u
static uint32_t DECODE[4][256];

/* The start of `mark` when it ends with the last quote in hay[0:end) (base64 and key ids hold
 * no quote, so the mark is found with one memrchr instead of a search), or -1. */
static Py_ssize_t
mark_before(const char *hay, Py_ssize_t end, const char *mark, Py_ssize_t n)
{
    const char *quote = end > 0 ? memrchr(hay, '"', (size_t)end) : NULL;
    if (quote == NULL)
        return -1;
    Py_ssize_t at = quote - hay + 1 - n;
    return at >= 0 && memcmp(hay + at, mark, (size_t)n) == 0 ? at : -1;
}

/* Canonical base64 (the alphabet, padding only at the end, a length of 4k) into `out`;
 * the decoded length, or -1 for anything else (the Python path then decides). */
static Py_ssize_t
b64decode(const unsigned char *in, Py_ssize_t n, unsigned char *out)
{
    if (n == 0 || n % 4 != 0)
        return -1;
    Py_ssize_t pad = in[n - 1] == '=' ? (in[n - 2] == '=' ? 2 : 1) : 0;
    Py_ssize_t full = pad ? n - 4 : n, written = 0;
    for (Py_ssize_t i = 0; i < full; i += 4) {
        uint32_t v = DECODE[0][in[i]] | DECODE[1][in[i + 1]] | DECODE[2][in[i + 2]]
                     | DECODE[3][in[i + 3]];
        if (v & BAD)
            return -1;
        out[written] = (unsigned char)(v >> 16);
        out[written + 1] = (unsigned char)(v >> 8);
        out[written + 2] = (unsigned char)v;
        written += 3;
    }
    if (pad) {
        const unsigned char *q = in + n - 4;
        uint32_t v = DECODE[0][q[0]] | DECODE[1][q[1]] | (pad == 1 ? DECODE[2][q[2]] : 0);
        if (v & BAD)
            return -1;
        out[written++] = (unsigned char)(v >> 16);
        if (pad == 1)
            out[written++] = (unsigned char)(v >> 8);
    }
    return written;
}

static void
b64encode(const unsigned char *in, Py_ssize_t n, char *out)
{
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned int v = ((unsigned)in[i] << 16) | ((unsigned)in[i + 1] << 8) | in[i + 2];
        *out++ = B64[v >> 18];
        *out++ = B64[(v >> 12) & 63];
        *out++ = B64[(v >> 6) & 63];
        *out++ = B64[v & 63];
    }
    if (n - i == 1) {
        unsigned int v = (unsigned)in[i] << 16;
        *out++ = B64[v >> 18];
        *out++ = B64[(v >> 12) & 63];
        *out++ = '=';
        *out++ = '=';
    } else if (n - i == 2) {
        unsigned int v = ((unsigned)in[i] << 16) | ((unsigned)in[i + 1] << 8);
        *out++ = B64[v >> 18];
        *out++ = B64[(v >> 12) & 63];
        *out++ = B64[(v >> 6) & 63];
        *out++ = '=';
    }
}

#define GCM_CAPSULE "habitus.crypto._envelope.data_key"

/* a user's data key made ready once, for each direction: AES-GCM's key schedule and its GHASH
 * table are computed when a context is keyed, and a call then sets only the nonce */
typedef struct {
    EVP_CIPHER_CTX *open, *seal;
} DataKey;

static void
free_data_key(PyObject *capsule)
{
    DataKey *key = PyCapsule_GetPointer(capsule, GCM_CAPSULE);
    if (key != NULL) {
        EVP_CIPHER_CTX_free(key->open);
        EVP_CIPHER_CTX_free(key->seal);
        PyMem_Free(key);
    }
}

/* data_key(key) -> capsule: a user's 32-byte AES-256-GCM data key made ready once */
static PyObject *
data_key(PyObject *self, PyObject *raw)
{
    if (!PyBytes_Check(raw) || PyBytes_GET_SIZE(raw) != KEY_BYTES) {
        PyErr_SetString(PyExc_TypeError, "data_key(key: bytes (32))");
        return NULL;
    }
    DataKey *key = PyMem_Calloc(1, sizeof(DataKey));
    if (key == NULL)
        return PyErr_NoMemory();
    const unsigned char *bytes = (const unsigned char *)PyBytes_AS_STRING(raw);
    key->open = EVP_CIPHER_CTX_new();
    key->seal = EVP_CIPHER_CTX_new();
    PyObject *capsule = NULL;
    if (key->open != NULL && key->seal != NULL
        && EVP_DecryptInit_ex(key->open, gcm, NULL, bytes, NULL)
        && EVP_EncryptInit_ex(key->seal, gcm, NULL, bytes, NULL))
        capsule = PyCapsule_New(key, GCM_CAPSULE, free_data_key);
    else
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL could not key AES-GCM");
    if (capsule == NULL) {
        EVP_CIPHER_CTX_free(key->open);
        EVP_CIPHER_CTX_free(key->seal);
        PyMem_Free(key);
    }
    return capsule;
}

static PyObject *
refuse(const char *why)
{
    PyErr_SetString(SealError, why);
    return NULL;
}

/* open_enveloped(memo, fresh_after, data) -> bytes | None
 *
 * `memo` maps a key id (bytes) to (read_at, cipher, owner, offset, key): the entry counts
 * when read_at >= fresh_after and the envelope holds `owner` (at `offset`, or elsewhere in
 * the envelope, as Keyring.envelope_key accepts it); `key` is the key made ready
 * (`data_key`). Returns the body's plain JSON (the envelope, then `,"payload":` and the opened
 * payload, then `}`), None where the Python path must decide, and raises SealError for a body
 * that does not open. The body comes last, so that functools.partial binds the rest once per
 * batch and a consumer's call per body goes straight to C. */
static PyObject *
open_enveloped(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyDict_Check(args[0]) || !PyFloat_Check(args[1])
        || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "open_enveloped(memo: dict, fresh_after: float, "
                                         "data: bytes)");
        return NULL;
    }
    PyObject *memo = args[0];
    double fresh_after = PyFloat_AS_DOUBLE(args[1]);
    const char *data = PyBytes_AS_STRING(args[2]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[2]);
    if (n < (Py_ssize_t)KID_END_LEN || memcmp(data + n - KID_END_LEN, KID_END, KID_END_LEN))
        Py_RETURN_NONE;
    /* where a quote is not where the layout puts it, the Python path searches and decides */
    Py_ssize_t kid_at = mark_before(data, n - KID_END_LEN, KID_MARK, KID_MARK_LEN);
    Py_ssize_t at = kid_at < 0 ? -1 : mark_before(data, kid_at, PAYLOAD_MARK,
                                                   PAYLOAD_MARK_LEN);
    if (at < 0)
        Py_RETURN_NONE;
    Py_ssize_t kid_start = kid_at + KID_MARK_LEN, kid_len = n - KID_END_LEN - kid_start;
    if (kid_len <= 0)
        Py_RETURN_NONE;

    PyObject *kid = PyBytes_FromStringAndSize(data + kid_start, kid_len);
    if (kid == NULL)
        return NULL;
    PyObject *entry = PyDict_GetItemWithError(memo, kid);
    Py_DECREF(kid);
    if (entry == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    /* held for the call: nothing below runs Python code, but a key must not be freed under us
     * whatever a later edit adds (the keyring's `forget` clears the memo) */
    Py_INCREF(entry);
    PyObject *result = NULL;
    unsigned char stack[STACK_BLOB];
    unsigned char *blob = stack;
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 5)
        goto python_decides;
    PyObject *read_at = PyTuple_GET_ITEM(entry, 0), *owner = PyTuple_GET_ITEM(entry, 2);
    PyObject *offset_obj = PyTuple_GET_ITEM(entry, 3), *compiled = PyTuple_GET_ITEM(entry, 4);
    /* written as the Python path compares, so that a NaN counts as stale on both */
    if (!PyFloat_Check(read_at) || !(PyFloat_AS_DOUBLE(read_at) >= fresh_after)
        || !PyBytes_Check(owner) || !PyLong_Check(offset_obj)
        || !PyCapsule_IsValid(compiled, GCM_CAPSULE))
        goto python_decides;
    EVP_CIPHER_CTX *dctx = ((DataKey *)PyCapsule_GetPointer(compiled, GCM_CAPSULE))->open;
    Py_ssize_t offset = PyLong_AsSsize_t(offset_obj);
    if (offset == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto python_decides;
    }
    /* the owner where it stood in the envelope the entry was read for, or anywhere else in
     * this one (an event of another type places it elsewhere), as EnvelopeOpener accepts it */
    Py_ssize_t owner_len = PyBytes_GET_SIZE(owner);
    const char *owner_bytes = PyBytes_AS_STRING(owner);
    if (offset < 0 || offset > at - owner_len
        || memcmp(data + offset, owner_bytes, (size_t)owner_len)) {
        if (owner_len == 0 || memmem(data, (size_t)at, owner_bytes, (size_t)owner_len) == NULL)
            goto python_decides;
    }

    const unsigned char *b64 = (const unsigned char *)data + at + PAYLOAD_MARK_LEN;
    Py_ssize_t b64_len = kid_at - (at + PAYLOAD_MARK_LEN);
    if (b64_len / 4 * 3 > STACK_BLOB) {
        blob = PyMem_Malloc((size_t)(b64_len / 4 * 3));
        if (blob == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    Py_ssize_t blob_len = b64decode(b64, b64_len, blob);
    if (blob_len < 0 || blob_len > INT_MAX || at > INT_MAX)
        goto python_decides;
    if (blob_len < NONCE_BYTES + TAG_BYTES) {
        refuse("does not open with this key for this envelope");
        goto done;
    }
    int ct_len = (int)(blob_len - NONCE_BYTES - TAG_BYTES), len = 0;
    result = PyBytes_FromStringAndSize(NULL, at + (Py_ssize_t)FIELD_LEN + ct_len + 1);
    if (result == NULL)
        goto done;
    char *out = PyBytes_AS_STRING(result);
    memcpy(out, data, (size_t)at);
    memcpy(out + at, FIELD, FIELD_LEN);
    unsigned char *plain = (unsigned char *)out + at + FIELD_LEN;
    int opened = EVP_DecryptInit_ex(dctx, NULL, NULL, NULL, blob)
                 && EVP_DecryptUpdate(dctx, NULL, &len, (const unsigned char *)data, (int)at)
                 && EVP_DecryptUpdate(dctx, plain, &len, blob + NONCE_BYTES, ct_len)
                 && EVP_CIPHER_CTX_ctrl(dctx, EVP_CTRL_GCM_SET_TAG, TAG_BYTES,
                                        blob + NONCE_BYTES + ct_len)
                 && EVP_DecryptFinal_ex(dctx, plain + len, &len) > 0;
    if (!opened) {
        OPENSSL_cleanse(plain, (size_t)ct_len);  /* decrypted, but not authentic */
        Py_CLEAR(result);
        refuse("does not open with this key for this envelope");
        goto done;
    }
    out[at + FIELD_LEN + ct_len] = '}';
    goto done;
python_decides:
    result = Py_NewRef(Py_None);
done:
    if (blob != stack)
        PyMem_Free(blob);
    Py_DECREF(entry);
    return result;
}

/* seal_enveloped(body, key, kid) -> bytes
 *
 * The sealed form of an event's JSON as the envelope's model writes it, its payload the last
 * field: the payload's bytes sealed with a fresh random nonce, the envelope (every byte
 * before `,"payload":`, the first one: it cannot occur inside a JSON string) as the
 * associated data. ValueError when the body holds no payload field. */
static PyObject *
seal_enveloped(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    DataKey *key = nargs == 3 ? PyCapsule_GetPointer(args[1], GCM_CAPSULE) : NULL;
    if (key == NULL || !PyBytes_Check(args[0]) || !PyBytes_Check(args[2])) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "seal_enveloped(body: bytes, key: data_key(...), "
                                         "kid: bytes)");
        return NULL;
    }
    EVP_CIPHER_CTX *ectx = key->seal;
    const char *body = PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    const char *found = n > (Py_ssize_t)FIELD_LEN ? memmem(body, (size_t)n, FIELD, FIELD_LEN)
                                                  : NULL;
    if (found == NULL || body[n - 1] != '}') {
        PyErr_SetString(PyExc_ValueError, "the body holds no payload field");
        return NULL;
    }
    Py_ssize_t mark = found - body;
    Py_ssize_t plain_len = n - 1 - (mark + (Py_ssize_t)FIELD_LEN);
    if (plain_len < 0 || plain_len > INT_MAX - 64 || mark > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "the body holds no payload field");
        return NULL;
    }
    Py_ssize_t blob_len = NONCE_BYTES + plain_len + TAG_BYTES;
    Py_ssize_t b64_len = (blob_len + 2) / 3 * 4;
    Py_ssize_t kid_len = PyBytes_GET_SIZE(args[2]);
    PyObject *result = PyBytes_FromStringAndSize(
        NULL, mark + (Py_ssize_t)PAYLOAD_MARK_LEN + b64_len + (Py_ssize_t)KID_MARK_LEN + kid_len
                  + (Py_ssize_t)KID_END_LEN);
    if (result == NULL)
        return NULL;
    unsigned char stack[STACK_BLOB];
    unsigned char *blob = blob_len > STACK_BLOB ? PyMem_Malloc((size_t)blob_len) : stack;
    if (blob == NULL) {
        Py_DECREF(result);
        return PyErr_NoMemory();
    }
    int len = 0;
    /* the nonce from the kernel, as os.urandom takes it: a process forked from another (habitus
     * up's fork server) can never repeat its parent's, as a user-space generator's state could */
    if (getrandom(blob, NONCE_BYTES, 0) != NONCE_BYTES) {
        if (blob != stack)
            PyMem_Free(blob);
        Py_DECREF(result);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    int sealed = 1
                 && EVP_EncryptInit_ex(ectx, NULL, NULL, NULL, blob)
                 && EVP_EncryptUpdate(ectx, NULL, &len, (const unsigned char *)body, (int)mark)
                 && EVP_EncryptUpdate(ectx, blob + NONCE_BYTES, &len,
                                      (const unsigned char *)body + mark + FIELD_LEN,
                                      (int)plain_len)
                 && EVP_EncryptFinal_ex(ectx, blob + NONCE_BYTES + len, &len)
                 && EVP_CIPHER_CTX_ctrl(ectx, EVP_CTRL_GCM_GET_TAG, TAG_BYTES,
                                        blob + NONCE_BYTES + plain_len);
    if (!sealed) {
        if (blob != stack)
            PyMem_Free(blob);
        Py_DECREF(result);
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL could not seal");
        return NULL;
    }
    char *out = PyBytes_AS_STRING(result);
    memcpy(out, body, (size_t)mark);
    out += mark;
    memcpy(out, PAYLOAD_MARK, PAYLOAD_MARK_LEN);
    out += PAYLOAD_MARK_LEN;
    b64encode(blob, blob_len, out);
    out += b64_len;
    memcpy(out, KID_MARK, KID_MARK_LEN);
    out += KID_MARK_LEN;
    memcpy(out, PyBytes_AS_STRING(args[2]), (size_t)kid_len);
    out += kid_len;
    memcpy(out, KID_END, KID_END_LEN);
    if (blob != stack)
        PyMem_Free(blob);
    return result;
}

#define SIV_CAPSULE "habitus.crypto._envelope.column_key"

static void
free_column_key(PyObject *capsule)
{
    EVP_CIPHER_CTX_free(PyCapsule_GetPointer(capsule, SIV_CAPSULE));
}

/* column_key(key) -> capsule
 *
 * A user's 64-byte AES-SIV column key made ready once: an AES-SIV context keyed with it (its
 * subkeys and the S2V start computed), which every seal copies instead of keying again; most
 * of a value's cost in OpenSSL is the keying. */
static PyObject *
column_key(PyObject *self, PyObject *key)
{
    if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) != SIV_KEY_BYTES) {
        PyErr_SetString(PyExc_TypeError, "column_key(key: bytes (64))");
        return NULL;
    }
    EVP_CIPHER_CTX *keyed = EVP_CIPHER_CTX_new();
    if (keyed == NULL || !EVP_EncryptInit_ex(keyed, siv, NULL,
                                             (const unsigned char *)PyBytes_AS_STRING(key),
                                             NULL)) {
        EVP_CIPHER_CTX_free(keyed);
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL could not key AES-SIV");
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(keyed, SIV_CAPSULE, free_column_key);
    if (capsule == NULL)
        EVP_CIPHER_CTX_free(keyed);
    return capsule;
}

/* seal_column(column_key, owner, text) -> str | None
 *
 * A projection's column value (habitus/crypto/columns.py): `hc1:` and the base64 of the text's
 * AES-SIV ciphertext (RFC 5297: the synthetic IV, then the ciphertext) under the user's column
 * key (`column_key`), with `owner` as the one associated-data component: byte for byte what
 * the `cryptography` package's AESSIV makes. Deterministic by design: the same text seals to
 * the same value, so a sealed value is still a lookup key. None for an empty text (the Python
 * path stores it). */
static PyObject *
seal_column(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    EVP_CIPHER_CTX *keyed = nargs == 3 ? PyCapsule_GetPointer(args[0], SIV_CAPSULE) : NULL;
    if (keyed == NULL || !PyBytes_Check(args[1]) || !PyUnicode_Check(args[2])) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "seal_column(column_key, owner: bytes, text: str)");
        return NULL;
    }
    Py_ssize_t text_len;
    const char *text = PyUnicode_AsUTF8AndSize(args[2], &text_len);
    if (text == NULL)
        return NULL;
    Py_ssize_t owner_len = PyBytes_GET_SIZE(args[1]);
    if (text_len == 0 || text_len > INT_MAX - 64 || owner_len > INT_MAX)
        Py_RETURN_NONE;
    Py_ssize_t blob_len = TAG_BYTES + text_len, b64_len = (blob_len + 2) / 3 * 4;
    unsigned char stack[STACK_BLOB];
    unsigned char *blob = blob_len > STACK_BLOB ? PyMem_Malloc((size_t)blob_len) : stack;
    if (blob == NULL)
        return PyErr_NoMemory();
    int len = 0;
    int sealed = EVP_CIPHER_CTX_copy(sctx, keyed)
                 && EVP_EncryptUpdate(sctx, NULL, &len,
                                      (const unsigned char *)PyBytes_AS_STRING(args[1]),
                                      (int)owner_len)
                 && EVP_EncryptUpdate(sctx, blob + TAG_BYTES, &len, (const unsigned char *)text,
                                      (int)text_len)
                 && EVP_EncryptFinal_ex(sctx, blob + TAG_BYTES + len, &len)
                 && EVP_CIPHER_CTX_ctrl(sctx, EVP_CTRL_AEAD_GET_TAG, TAG_BYTES, blob);
    /* the copy holds the user's column key: it must not outlive the call (an erasure destroys
     * the key, and this context would keep it until the next value is sealed) */
    EVP_CIPHER_CTX_reset(sctx);
    PyObject *result = NULL;
    if (!sealed) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL could not seal");
    } else {
        result = PyUnicode_New(COLUMN_PREFIX_LEN + b64_len, 127);
        if (result != NULL) {
            char *out = (char *)PyUnicode_1BYTE_DATA(result);
            memcpy(out, COLUMN_PREFIX, COLUMN_PREFIX_LEN);
            b64encode(blob, blob_len, out + COLUMN_PREFIX_LEN);
        }
    }
    if (blob != stack)
        PyMem_Free(blob);
    return result;
}

static PyMethodDef methods[] = {
    {"open_enveloped", (PyCFunction)(void (*)(void))open_enveloped, METH_FASTCALL,
     "The plain JSON of a body sealed with its envelope as associated data, None where the "
     "Python path must decide; SealError when it does not open."},
    {"data_key", data_key, METH_O, "A user's AES-GCM data key made ready once."},
    {"column_key", column_key, METH_O, "A user's AES-SIV column key made ready once."},
    {"seal_column", (PyCFunction)(void (*)(void))seal_column, METH_FASTCALL,
     "A column value sealed with the user's AES-SIV key, None for an empty text."},
    {"seal_enveloped", (PyCFunction)(void (*)(void))seal_enveloped, METH_FASTCALL,
     "The sealed form of an event's JSON (its payload the last field)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "habitus.crypto._envelope",
    "Sealing and opening an event body in one call each (see sealing.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__envelope(void)
{
    for (int pos = 0; pos < 4; pos++) {
        for (int c = 0; c < 256; c++)
            DECODE[pos][c] = BAD;
        for (uint32_t i = 0; i < 64; i++)
            DECODE[pos][(unsigned char)B64[i]] = i << (18 - 6 * pos);
    }
    gcm = EVP_aes_256_gcm();
    siv = EVP_CIPHER_fetch(NULL, "AES-256-SIV", NULL);
    sctx = EVP_CIPHER_CTX_new();
    if (gcm == NULL || siv == NULL || sctx == NULL) {
        PyErr_SetString(PyExc_ImportError, "OpenSSL has no AES-256-GCM or AES-256-SIV");
        return NULL;
    }
    PyObject *aead = PyImport_ImportModule("habitus.crypto.aead");
    if (aead == NULL)
        return NULL;
    SealError = PyObject_GetAttrString(aead, "SealError");
    Py_DECREF(aead);
    if (SealError == NULL)
        return NULL;
    return PyModule_Create(&module);
}
