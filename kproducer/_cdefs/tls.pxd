# Declarations of csrc/kp_tls.h.
from kproducer._cdefs.common cimport kp_status

cdef extern from "kp_tls.h" nogil:
    enum: KP_TLS_ERROR_MAX

    ctypedef enum kp_tls_input:
        KP_TLS_INPUT_NONE
        KP_TLS_INPUT_CA
        KP_TLS_INPUT_CERT
        KP_TLS_INPUT_KEY
        KP_TLS_INPUT_KEY_PASSWORD

    ctypedef struct kp_tls_config:
        const char *ca_file
        const char *cert_file
        const char *key_file
        const char *key_password
        int verify_peer
        int verify_hostname

    ctypedef struct kp_tls_ctx:
        pass

    kp_status kp_tls_ctx_new(kp_tls_ctx **out, const kp_tls_config *cfg, kp_tls_input *what,
                             char *err, size_t errlen)
    void kp_tls_ctx_free(kp_tls_ctx *t)
    int kp_tls_ctx_verify_hostname(const kp_tls_ctx *t)
