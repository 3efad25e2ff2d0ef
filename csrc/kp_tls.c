/* kp_tls.c - OpenSSL client contexts and sessions for kp_selector (see kp_tls.h). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "kp_tls.h"

struct kp_tls_ctx {
    SSL_CTX *ctx;
    int verify_hostname;
};

/* ---- error text ------------------------------------------------------------ */

static void text_set(char *buf, size_t len, const char *fmt, const char *a, const char *b)
{
    if (!buf || !len) return;
    snprintf(buf, len, fmt, a ? a : "", b ? b : "");
}

/* Appends the reasons in this thread's error queue ("; "-separated, repeats
 * dropped) to buf and empties the queue. Sets *verify_failed / *eof when the
 * queue holds SSL's "certificate verify failed" / "unexpected eof". */
static void queue_reasons(char *buf, size_t len, int *verify_failed, int *eof)
{
    size_t used = buf && len ? strlen(buf) : 0;
    int first = 1;
    unsigned long e;
    const char *data = NULL;
    int flags = 0;
    while ((e = ERR_get_error_all(NULL, NULL, NULL, &data, &flags)) != 0) {
        char reason[128];
        int sys = ERR_SYSTEM_ERROR(e);
        if (ERR_GET_LIB(e) == ERR_LIB_SSL) {
            if (ERR_GET_REASON(e) == SSL_R_CERTIFICATE_VERIFY_FAILED && verify_failed)
                *verify_failed = 1;
            if (ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING && eof) *eof = 1;
        }
        if (sys) {
            /* An errno wrapped by OpenSSL ("calling fopen(...)" as its data). */
            snprintf(reason, sizeof reason, "%s", strerror(ERR_GET_REASON(e)));
        } else {
            const char *r = ERR_reason_error_string(e);
            if (r)
                snprintf(reason, sizeof reason, "%s", r);
            else
                snprintf(reason, sizeof reason, "OpenSSL error 0x%lx", e);
        }
        /* "system lib" only says another library failed: its errno came first. */
        if (strcmp(reason, "system lib") == 0 || (buf && strstr(buf, reason))) continue;
        if (!buf || used + 3 >= len) continue;
        int n = snprintf(buf + used, len - used, "%s%s", first ? "" : "; ", reason);
        first = 0;
        if (n > 0) used = used + (size_t)n < len ? used + (size_t)n : len - 1;
        if (!sys && (flags & ERR_TXT_STRING) && data && *data && used + 5 < len) {
            n = snprintf(buf + used, len - used, " (%s)", data);
            if (n > 0) used = used + (size_t)n < len ? used + (size_t)n : len - 1;
        }
    }
}

static kp_status fail_input(kp_tls_input *what, kp_tls_input input, char *err, size_t errlen,
                            const char *prefix, const char *file)
{
    if (what) *what = input;
    text_set(err, errlen, prefix, file, NULL);
    queue_reasons(err, errlen, NULL, NULL);
    return KP_ERR_TLS;
}

/* ---- context --------------------------------------------------------------- */

/* CA bundles of the common Linux layouts (Go's crypto/x509 list; librdkafka probes the
 * same places). */
static const char *const ca_bundles[] = {
    "/etc/ssl/certs/ca-certificates.crt",                /* Debian, Ubuntu, Gentoo, Arch */
    "/etc/pki/tls/certs/ca-bundle.crt",                  /* RHEL, Fedora, Amazon Linux */
    "/etc/ssl/ca-bundle.pem",                            /* openSUSE */
    "/etc/pki/tls/cacert.pem",                           /* OpenELEC */
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", /* CentOS/RHEL 7 */
    "/etc/ssl/cert.pem",                                 /* Alpine */
};

/* The system CA store: OpenSSL's default paths (SSL_CERT_FILE / SSL_CERT_DIR when set, else
 * cert.pem and certs/ under the OPENSSLDIR it was built with). The release wheel's static
 * OpenSSL has OPENSSLDIR /etc/ssl, where RHEL-family systems keep no bundle; so when neither
 * variable is set and that cert.pem is missing, the first bundle found above is loaded too. */
static int load_system_cas(SSL_CTX *ctx)
{
    if (SSL_CTX_set_default_verify_paths(ctx) != 1) return 0;
    if (getenv(X509_get_default_cert_file_env()) || getenv(X509_get_default_cert_dir_env()) ||
        access(X509_get_default_cert_file(), R_OK) == 0)
        return 1;
    for (size_t i = 0; i < sizeof ca_bundles / sizeof ca_bundles[0]; i++) {
        if (access(ca_bundles[i], R_OK) == 0 && SSL_CTX_load_verify_locations(ctx, ca_bundles[i], NULL) == 1)
            break;
        ERR_clear_error();
    }
    return 1;
}

/* pem_password_cb's userdata while the key loads: the configured password, and whether
 * OpenSSL asked for it (the key is encrypted: KP_TLS_INPUT_KEY_PASSWORD on failure). */
struct password_ask {
    const char *password;
    int asked;
};

/* pem_password_cb: the configured password, or none (never a terminal prompt,
 * which OpenSSL's default callback would attempt). */
static int password_cb(char *buf, int size, int rwflag, void *userdata)
{
    (void)rwflag;
    struct password_ask *ask = userdata;
    if (!ask) return 0;
    ask->asked = 1;
    const char *pw = ask->password;
    if (!pw || size <= 0) return 0;
    size_t n = strlen(pw);
    if (n > (size_t)size) return -1;
    memcpy(buf, pw, n);
    return (int)n;
}

kp_status kp_tls_ctx_new(kp_tls_ctx **out, const kp_tls_config *cfg, kp_tls_input *what,
                         char *err, size_t errlen)
{
    if (what) *what = KP_TLS_INPUT_NONE;
    if (err && errlen) err[0] = '\0';
    if (!out || !cfg) return KP_ERR_INVALID;
    *out = NULL;
    kp_tls_ctx *t = calloc(1, sizeof *t);
    if (!t) return KP_ERR_NOMEM;
    ERR_clear_error();
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (!t->ctx) {
        free(t);
        return fail_input(what, KP_TLS_INPUT_NONE, err, errlen, "cannot create a TLS context: ", NULL);
    }
    t->verify_hostname = cfg->verify_peer && cfg->verify_hostname;
    SSL_CTX *ctx = t->ctx;
    kp_status st = KP_OK;
    (void)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* SSL_write returns after each record it writes (the selector writes a
     * staged send across polls) and accepts the retry from another address
     * (the send buffer may be reallocated between polls): SSL_write(3). */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_verify(ctx, cfg->verify_peer ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    SSL_CTX_set_default_passwd_cb(ctx, password_cb);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL);

    if (cfg->ca_file) {
        if (SSL_CTX_load_verify_locations(ctx, cfg->ca_file, NULL) != 1) {
            st = fail_input(what, KP_TLS_INPUT_CA, err, errlen, "cannot load the CA file %s: ",
                            cfg->ca_file);
            goto fail;
        }
    } else if (cfg->verify_peer && !load_system_cas(ctx)) {
        st = fail_input(what, KP_TLS_INPUT_CA, err, errlen, "cannot load the system CA store: ", NULL);
        goto fail;
    }
    if (cfg->cert_file) {
        if (SSL_CTX_use_certificate_chain_file(ctx, cfg->cert_file) != 1) {
            st = fail_input(what, KP_TLS_INPUT_CERT, err, errlen,
                            "cannot load the client certificate from %s: ", cfg->cert_file);
            goto fail;
        }
        const char *key_file = cfg->key_file ? cfg->key_file : cfg->cert_file;
        /* The password is only needed while the key is decrypted. */
        struct password_ask ask = {cfg->key_password, 0};
        SSL_CTX_set_default_passwd_cb_userdata(ctx, &ask);
        int ok = SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM);
        SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL);
        if (ok != 1) {
            st = fail_input(what, ask.asked ? KP_TLS_INPUT_KEY_PASSWORD : KP_TLS_INPUT_KEY, err, errlen,
                            "cannot load the private key from %s: ", key_file);
            goto fail;
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
            st = fail_input(what, KP_TLS_INPUT_KEY, err, errlen,
                            "the private key does not match the client certificate: ", NULL);
            goto fail;
        }
    } else if (cfg->key_file) {
        if (what) *what = KP_TLS_INPUT_CERT;
        text_set(err, errlen, "a private key was given without a client certificate", NULL, NULL);
        st = KP_ERR_TLS;
        goto fail;
    }
    *out = t;
    return KP_OK;
fail:
    ERR_clear_error();
    kp_tls_ctx_free(t);
    return st;
}

void kp_tls_ctx_free(kp_tls_ctx *t)
{
    if (!t) return;
    SSL_CTX_free(t->ctx); /* drops our reference; live SSL objects keep theirs */
    free(t);
}

int kp_tls_ctx_verify_hostname(const kp_tls_ctx *t)
{
    return t ? t->verify_hostname : 0;
}

/* ---- socket BIO ---------------------------------------------------------------- */

/* OpenSSL's own socket BIO writes with write(2), which raises SIGPIPE when the
 * peer has gone; Python ignores SIGPIPE, but a program that restores its
 * default action (a common idiom for command-line tools) would die. This BIO
 * is the socket BIO with send(MSG_NOSIGNAL), as kp_selector's plaintext path. */

static int bio_fd(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static int kp_bio_write(BIO *b, const char *buf, int len)
{
    BIO_clear_retry_flags(b);
    if (len <= 0) return 0;
    ssize_t n = send(bio_fd(b), buf, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_write(b);
        return -1;
    }
    return (int)n;
}

static int kp_bio_read(BIO *b, char *buf, int len)
{
    BIO_clear_retry_flags(b);
    if (len <= 0) return 0;
    ssize_t n = recv(bio_fd(b), buf, (size_t)len, MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_read(b);
        return -1;
    }
    /* OpenSSL asks BIO_eof() to tell "unexpected EOF" from an I/O error. */
    if (n == 0) BIO_set_flags(b, BIO_FLAGS_IN_EOF);
    return (int)n;
}

static long kp_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    (void)ptr;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1; /* nothing is buffered here */
    case BIO_CTRL_EOF:
        return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    default:
        return 0;
    }
}

static int kp_bio_create(BIO *b)
{
    BIO_set_data(b, (void *)(intptr_t)-1);
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *bio_method;
static CRYPTO_ONCE bio_once = CRYPTO_ONCE_STATIC_INIT;

static void bio_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kproducer socket");
    if (!m) return;
    if (!BIO_meth_set_write(m, kp_bio_write) || !BIO_meth_set_read(m, kp_bio_read) ||
        !BIO_meth_set_ctrl(m, kp_bio_ctrl) || !BIO_meth_set_create(m, kp_bio_create)) {
        BIO_meth_free(m);
        return;
    }
    bio_method = m; /* lives as long as the process, as OpenSSL's own methods */
}

kp_status kp_tls_session_set_fd(struct ssl_st *ssl, int fd)
{
    if (!ssl || fd < 0) return KP_ERR_INVALID;
    if (!CRYPTO_THREAD_run_once(&bio_once, bio_method_init) || !bio_method) return KP_ERR_NOMEM;
    BIO *b = BIO_new(bio_method);
    if (!b) return KP_ERR_NOMEM;
    BIO_set_data(b, (void *)(intptr_t)fd);
    SSL_set_bio(ssl, b, b); /* one reference, owned by ssl from here */
    return KP_OK;
}

/* ---- sessions ---------------------------------------------------------------- */

static int is_ip_literal(const char *name)
{
    unsigned char addr[16];
    if (inet_pton(AF_INET, name, addr) == 1) return 1;
    /* "fe80::1%eth0": the zone is not part of a certificate's address */
    char buf[64];
    size_t n = strcspn(name, "%");
    if (n >= sizeof buf) return 0;
    memcpy(buf, name, n);
    buf[n] = '\0';
    return inet_pton(AF_INET6, buf, addr) == 1;
}

kp_status kp_tls_session_new(const kp_tls_ctx *t, const char *server_name, struct ssl_st **out,
                             char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!t || !out) return KP_ERR_INVALID;
    *out = NULL;
    ERR_clear_error();
    SSL *ssl = SSL_new(t->ctx);
    if (!ssl) {
        ERR_clear_error();
        return KP_ERR_NOMEM;
    }
    int ip = server_name && *server_name && is_ip_literal(server_name);
    if (server_name && *server_name && !ip && SSL_set_tlsext_host_name(ssl, server_name) != 1) {
        /* SNI carries DNS names only (RFC 6066 section 3); a bad name is not fatal for it. */
        ERR_clear_error();
    }
    if (t->verify_hostname) {
        int ok;
        if (!server_name || !*server_name) {
            text_set(err, errlen, "hostname verification needs the server's name", NULL, NULL);
            SSL_free(ssl);
            return KP_ERR_TLS;
        }
        if (ip) {
            char buf[64];
            size_t n = strcspn(server_name, "%");
            memcpy(buf, server_name, n < sizeof buf ? n : sizeof buf - 1);
            buf[n < sizeof buf ? n : sizeof buf - 1] = '\0';
            ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), buf);
        } else {
            ok = SSL_set1_host(ssl, server_name);
        }
        if (ok != 1) {
            text_set(err, errlen, "cannot check the certificate against the name %s: ", server_name, NULL);
            queue_reasons(err, errlen, NULL, NULL);
            SSL_free(ssl);
            return KP_ERR_TLS;
        }
        /* No partial wildcards ("w*.example.com"), as RFC 6125 section 7.2 advises. */
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    }
    *out = ssl;
    return KP_OK;
}

int kp_tls_describe_failure(struct ssl_st *ssl, char *buf, size_t len)
{
    int verify_failed = 0, eof = 0;
    if (buf && len) buf[0] = '\0';
    queue_reasons(buf, len, &verify_failed, &eof);
    /* The verify result alone proves nothing: with verify_peer off it still
     * holds what the check would have said. */
    long vr = ssl && verify_failed ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (vr != X509_V_OK && buf && len) {
        char name[300] = "";
        X509_VERIFY_PARAM *param = ssl ? SSL_get0_param(ssl) : NULL;
        if (param && (vr == X509_V_ERR_HOSTNAME_MISMATCH || vr == X509_V_ERR_IP_ADDRESS_MISMATCH)) {
            char *ipname = vr == X509_V_ERR_IP_ADDRESS_MISMATCH ? X509_VERIFY_PARAM_get1_ip_asc(param) : NULL;
            const char *host = ipname ? ipname : X509_VERIFY_PARAM_get0_host(param, 0);
            if (host) snprintf(name, sizeof name, " (the server's certificate does not name %s)", host);
            OPENSSL_free(ipname);
        }
        snprintf(buf, len, "certificate verify failed: %s%s",
                 X509_verify_cert_error_string(vr), name);
    } else if (buf && len && !buf[0]) {
        snprintf(buf, len, "%s", "TLS protocol error");
    }
    return eof;
}
