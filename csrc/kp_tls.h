/* kp_tls.h - client-side TLS (OpenSSL 3) for the selector's connections.
 *
 * A kp_tls_ctx is one SSL_CTX configured from PEM files: the CA bundle that
 * verifies brokers, an optional client certificate chain and private key
 * (mutual TLS), whether to verify the peer at all and whether to check the
 * broker's name against its certificate (Kafka's
 * ssl.endpoint.identification.algorithm=https). The selector asks it for one
 * SSL object per connection (kp_tls_session_new) and drives the non-blocking
 * handshake and I/O itself (kp_selector.c), as librdkafka does.
 *
 * Each SSL object holds a reference on the SSL_CTX (SSL_new), so the context
 * may be freed while connections made from it are still open.
 *
 * Errors are kp_status codes plus a text built from OpenSSL's error queue
 * (its reason strings, and X509_verify_cert_error_string for a failed
 * certificate check: "certificate verify failed: hostname mismatch").
 * OpenSSL's error queue is per thread: the functions here clear it before
 * the calls whose failure they describe.
 */
#ifndef KP_TLS_H
#define KP_TLS_H

#include "kp_common.h"

struct ssl_st; /* OpenSSL's SSL */

/* Longest error text kept (truncated beyond). */
#define KP_TLS_ERROR_MAX 256

/* Which input of kp_tls_ctx_new failed (kp_tls_config_error.what). */
typedef enum kp_tls_input {
    KP_TLS_INPUT_NONE = 0,     /* not tied to one input (out of memory, OpenSSL itself) */
    KP_TLS_INPUT_CA = 1,       /* ca_file */
    KP_TLS_INPUT_CERT = 2,     /* cert_file */
    KP_TLS_INPUT_KEY = 3,      /* key_file, or the key not matching the cert */
    KP_TLS_INPUT_KEY_PASSWORD = 4, /* an encrypted key that key_password (or its absence)
                                      did not decrypt: OpenSSL asked for a password */
} kp_tls_input;

typedef struct kp_tls_config {
    const char *ca_file;       /* PEM CA certificates; NULL: the system's store (kp_tls.c) */
    const char *cert_file;     /* PEM client certificate chain (leaf first); NULL: none */
    const char *key_file;      /* PEM private key; NULL: taken from cert_file */
    const char *key_password;  /* for an encrypted key; NULL: none. Not kept after loading. */
    int verify_peer;           /* 0: accept any server certificate (testing only) */
    int verify_hostname;       /* 1: the certificate must name the host connected to */
} kp_tls_config;

typedef struct kp_tls_ctx kp_tls_ctx;

/* Builds a context; on failure returns KP_ERR_TLS (or KP_ERR_NOMEM) with
 * *what naming the failed input and err[0..errlen) a NUL-terminated reason
 * ("cannot load the private key: bad decrypt"). err may be NULL. */
kp_status kp_tls_ctx_new(kp_tls_ctx **out, const kp_tls_config *cfg, kp_tls_input *what,
                         char *err, size_t errlen);

/* NULL is allowed. Connections already made keep working. */
void kp_tls_ctx_free(kp_tls_ctx *t);

/* 1 when the context checks the server's name. */
int kp_tls_ctx_verify_hostname(const kp_tls_ctx *t);

/* A client SSL object for one connection to `server_name` (the broker's host
 * as configured or advertised: a DNS name or a numeric address). The name is
 * sent as SNI when it is a DNS name and checked against the certificate
 * (DNS or IP subjectAltName) when hostname verification is on. Partial
 * writes and moving write buffers are enabled. KP_ERR_NOMEM, or KP_ERR_TLS
 * with err filled. */
kp_status kp_tls_session_new(const kp_tls_ctx *t, const char *server_name, struct ssl_st **out,
                             char *err, size_t errlen);

/* Attaches the connected socket fd to ssl (a socket BIO writing with
 * MSG_NOSIGNAL; the fd stays the caller's to close). KP_ERR_NOMEM. */
kp_status kp_tls_session_set_fd(struct ssl_st *ssl, int fd);

/* Describes why an SSL call on `ssl` failed with SSL_get_error() == ssl_error
 * (SSL_ERROR_SSL), reading (and clearing) this thread's OpenSSL error queue:
 * "certificate verify failed: hostname mismatch", "tlsv13 alert certificate
 * required", ... Returns 1 when the failure is an EOF from the peer without
 * close_notify (OpenSSL's "unexpected eof while reading"), else 0. */
int kp_tls_describe_failure(struct ssl_st *ssl, char *buf, size_t len);

#endif /* KP_TLS_H */
