// Test-only: certificates init_keys() never makes (expired, not yet valid),
// signed by the CA of an init_keys() directory.
#pragma once

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace outboard::testing {

/// Writes `out`.pem and `out`.key: an Ed25519 key and a certificate for it
/// named `cn`, valid from now + `from_s` to now + `to_s`, with extended key
/// usage `usage` (an agent's, with serverAuth, lists localhost), signed by
/// `ca_dir`'s CA. False if any step failed.
inline bool issue_certificate(const std::string& ca_dir, const std::string& out, const char* cn, const char* usage,
                              long from_s, long to_s) {
  FILE* f = std::fopen((ca_dir + "/ca.key").c_str(), "r");
  EVP_PKEY* ca_key = f ? PEM_read_PrivateKey(f, nullptr, nullptr, nullptr) : nullptr;
  if (f) std::fclose(f);
  f = std::fopen((ca_dir + "/ca.pem").c_str(), "r");
  X509* ca = f ? PEM_read_X509(f, nullptr, nullptr, nullptr) : nullptr;
  if (f) std::fclose(f);
  EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  X509* cert = X509_new();
  auto ext = [&](int nid, const char* value) {
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, ca, cert, nullptr, nullptr, 0);
    X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
    const bool ok = e && X509_add_ext(cert, e, -1) == 1;
    X509_EXTENSION_free(e);
    return ok;
  };
  X509_NAME* name = cert ? X509_get_subject_name(cert) : nullptr;
  bool ok = ca_key && ca && key && cert && X509_set_version(cert, 2) &&
            ASN1_INTEGER_set(X509_get_serialNumber(cert), 4242) &&
            X509_gmtime_adj(X509_getm_notBefore(cert), from_s) && X509_gmtime_adj(X509_getm_notAfter(cert), to_s) &&
            X509_set_pubkey(cert, key) &&
            X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1,
                                       0) &&
            X509_set_issuer_name(cert, X509_get_subject_name(ca)) && ext(NID_basic_constraints, "critical,CA:FALSE") &&
            ext(NID_key_usage, "critical,digitalSignature") && ext(NID_ext_key_usage, usage) &&
            (!std::strstr(usage, "serverAuth") || ext(NID_subject_alt_name, "DNS:localhost")) &&
            X509_sign(cert, ca_key, nullptr) > 0;
  if (ok && (f = std::fopen((out + ".pem").c_str(), "w"))) {
    ok = PEM_write_X509(f, cert) == 1;
    std::fclose(f);
  }
  if (ok && (f = std::fopen((out + ".key").c_str(), "w"))) {
    ok = PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
    std::fclose(f);
  }
  EVP_PKEY_free(ca_key), EVP_PKEY_free(key), X509_free(ca), X509_free(cert);
  return ok && ::chmod((out + ".key").c_str(), 0600) == 0;
}

}  // namespace outboard::testing
