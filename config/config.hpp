#pragma once
/** The typed configuration rebound runs with (SPEC section 2).

    Everything here is plain data, built once by `load_config` and then shared read-only by
    every worker thread; nothing on the data path parses YAML or strings again.
*/
#include "proxy/retry/name_hash.hpp"
#include "proxy/retry/policy.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rebound::config {

using duration = std::chrono::milliseconds;

/// A host:port to bind (listen, admin). `host` is an IP literal without brackets.
struct endpoint {
  std::string host;
  std::uint16_t port = 0;
};

enum class unknown_hosts_policy { allow, deny };

/// Where a dependency's requests are sent (`origin:`), instead of the host the client named.
struct origin_url {
  std::string scheme = "http";
  std::string host;  ///< for the resolver: IPv6 literals without brackets
  std::uint16_t port = 80;
  bool operator==(const origin_url&) const = default;
};

/** `tls:` of a dependency whose origin is https:// (SPEC section 5). Verification is always
    on: there is no field to turn it off. */
struct tls_settings {
  std::string ca_file;      ///< PEM bundle of trusted CAs; empty = the system store
  std::string server_name;  ///< SNI and the name verified; empty = the origin's host
  std::string client_cert;  ///< PEM chain for mTLS; with client_key
  std::string client_key;
  bool operator==(const tls_settings&) const = default;
};

/// A URL rebound calls itself (an OAuth2 token endpoint).
struct service_url {
  origin_url origin;
  std::string target = "/";  ///< path and query
  bool operator==(const service_url&) const = default;
};

/** `auth:`: a credential rebound owns, adds as `Authorization: Bearer ...`, and makes
    sure is fresh before every attempt. Holds file paths, never a secret itself. */
struct auth_settings {
  enum class kind { oauth2_client_credentials, bearer_file } type = kind::bearer_file;
  // oauth2_client_credentials
  service_url token_url;
  std::string client_id;
  std::string client_secret_file;
  std::string scope;          ///< empty: none sent
  std::string token_ca_file;  ///< `ca_file` for an https token_url; empty = the system store
  // bearer_file
  std::string path;
  /// Refresh this long before expiry (capped at half the token's lifetime, so a short-lived
  /// token is still used for a while).
  duration refresh_skew = std::chrono::seconds(30);
  bool operator==(const auth_settings&) const = default;
};

/** Limits on what a client may send. SPEC section 2 is silent on these; they are
    rebound's own keys (`limits:`), documented in docs/configuration.md. */
struct request_limits {
  std::size_t max_request_head = 64 * 1024;          ///< request line + fields; above it: 431
  std::uint64_t max_request_body = 0;                ///< 0 = unlimited; above it: 413
  duration idle_timeout = std::chrono::seconds(60);  ///< idle keep-alive or stalled transfer
  /// Client connections served at once on the proxy port; past it a new one gets 503 and
  /// is closed (the admin port is not counted, so health checks still get through).
  std::size_t max_connections = 10'000;
  /// From a request's first byte to the end of its head; past it: 408 (slow heads hold a
  /// connection slot each, the slowloris attack).
  duration head_timeout = std::chrono::seconds(10);
  /// A request body must arrive within body_timeout plus one second per min_body_rate
  /// bytes received: a body trickled slower is cut (408 while nothing went upstream).
  duration body_timeout = std::chrono::seconds(30);
  std::uint64_t min_body_rate = 1024;  ///< bytes per second, see body_timeout
  /// Hosts no dependency names that get their own budget, breaker and metric series; the
  /// rest share `(other hosts)`. Bounds what a buggy or hostile app can make rebound track.
  std::size_t max_unknown_hosts = 100;
  /// Request bodies kept for a replay, summed over the process (http/retry_buffer.hpp):
  /// past it a body streams through once instead of being kept.
  std::uint64_t retry_buffer = 128ull << 20;
  /// What one HTTP/2 client connection may hold of request bodies held whole, over all its
  /// streams (h2/server_connection.hpp); never less than one stream's largest body.
  std::uint64_t http2_connection_buffer = 8ull << 20;
  /// What one HTTP/2 client connection may hold of answers held whole (unary gRPC answers
  /// waiting for a client that does not read them, h2/answer_budget.hpp); never less than one
  /// answer's largest body.
  std::uint64_t http2_answer_buffer = 4ull << 20;
};

// The policy a request runs under, and each of its parts, are retry's (proxy/retry/policy.hpp):
// the config composes them into dependencies and routes, and resolves them (load_policy.cpp).
using retry::allowed_retries;
using retry::backoff_policy;
using retry::breaker_mode;
using retry::breaker_policy;
using retry::budget_policy;
using retry::builtin_max_retries;
using retry::builtin_schedule;
using retry::builtin_total_timeout;
using retry::concurrency_mode;
using retry::concurrency_policy;
using retry::context_kind;
using retry::hands_over_calls;
using retry::hedge_policy;
using retry::idempotency_policy;
using retry::idempotent_method;
using retry::jitter_kind;
using retry::max_total_timeout;
using retry::outlier_policy;
using retry::policy;
using retry::retry_range;
using retry::to_string;

/** A route of a dependency (SPEC 2): requests it matches get its policy. Its budget and
    breaker are the dependency's, which R-7 tracks per dependency. */
struct route {
  std::string path_prefix;           ///< a plain prefix of the path (no query); empty = every path
  std::vector<std::string> methods;  ///< exact, case-sensitive; empty = every method
  policy effective;                  ///< resolved: route over dependency over defaults

  bool matches(std::string_view method, std::string_view path) const;
};

struct dependency {
  std::string name;
  std::vector<std::string> hosts;    ///< as written: `host` or `host:port`
  std::optional<origin_url> origin;  ///< unset: connect to the host the request names
  std::optional<tls_settings> tls;   ///< set exactly when origin is https://
  std::optional<auth_settings> auth;
  policy effective;           ///< resolved: dependency over defaults
  std::vector<route> routes;  ///< in file order: the first that matches wins

  /// The policy of the first route matching the request, else the dependency's own.
  const policy& policy_for(std::string_view method, std::string_view path) const;
};

/** A route of the inbound side (R-6 kept for the app behind rebound): which requests, and
    what rebound promises for them. */
struct inbound_route {
  route match;  ///< path_prefix and methods; `effective` is unused
  struct idempotency_settings {
    bool enabled = false;  ///< `idempotency:` written
    bool require = false;  ///< a request without a key is refused 400
    duration ttl = std::chrono::hours(24);  ///< R-6: at least 24 h
    bool scope_principal = true;            ///< keys are the caller's own (a hash of its credential)
    unsigned mismatch_status = 422;         ///< the same key with another payload: 422 or 409
  } idempotency;
  struct dedupe_settings {
    std::string header;  ///< the event id's field (X-Event-ID, webhook-id); empty: off
    duration ttl = std::chrono::hours(24 * 7);  ///< R-6: at least 7 days
  } dedupe;
  /// The methods whose keys are kept: the route's `methods`, else POST and PATCH.
  bool keeps_keys_for(std::string_view method) const;
};

/// `inbound:` — rebound in front of the app: a reverse proxy that keeps R-6's server side.
struct inbound_settings {
  bool configured = false;
  endpoint listen{"0.0.0.0", 8080};
  endpoint app{"127.0.0.1", 3000};
  /// A request body the gate reads whole (larger: 413), and the largest answer it pins.
  std::uint64_t max_body = 1 << 20;
  std::vector<inbound_route> routes;         ///< in file order: the first that matches wins
  /** How requests go to the app: once (retries are the caller's, one layer only), with the
      attempt timeout `attempt_timeout:` sets. */
  policy forward;
  /** How long a claimed key stays claimed once its request may have reached the app: the gate
      waits this long for the app's answer (to pin it) after the client's 504, and a key whose
      answer never comes is free again only then (seed 004: a gateway timeout, then a retry
      with the same key, is one payout). At least `attempt_timeout`; unset: 60s or
      `attempt_timeout`, whichever is longer. */
  duration claim_lease{0};
  /** Whose keys they are (`scope: principal`): a hash of this field's value. Authorization by
      default; a caller without it shares one key space with every other such caller, so where
      callers are told apart by something else (a cookie session, an auth gateway's X-User-Id),
      name that field here. */
  std::string principal_header = "Authorization";
  const inbound_route* route_for(std::string_view method, std::string_view path) const;
  bool needs_store() const;
};

/** `dns:` (issue 50): how upstream names are resolved. rebound asks DNS itself (c-ares, on each
    worker's own event loop) and keeps each answer for its TTL, held between `min_ttl` and
    `max_ttl`; a name that does not exist is asked again after `min_ttl`. */
struct dns_settings {
  /// `host` or `host:port` (IPv6 in brackets) of the servers to ask; empty: /etc/resolv.conf's.
  std::vector<std::string> servers;
  duration min_ttl = std::chrono::seconds(5);
  duration max_ttl = std::chrono::minutes(5);
  /// While the servers fail (no answer, SERVFAIL, refused), the last good answer of a name is
  /// used for this long past its TTL; then the lookup fails as R-4 says (`dns_failure`).
  duration stale_for = std::chrono::minutes(5);
  /// One lookup, every server and search domain: past it the request fails (or takes the stale answer).
  duration timeout = std::chrono::seconds(2);
  /// Happy Eyeballs (RFC 8305): another address is tried this long after the last one began
  /// while that one has not connected yet.
  duration connect_stagger = std::chrono::milliseconds(250);
  bool operator==(const dns_settings&) const = default;
};

struct config {
  std::string service = "unknown_service";  ///< the `service` label of every metric
  std::string log_level = "info";           ///< trace|debug|info|warn|error|off; --log-level wins
  endpoint listen{"127.0.0.1", 3128};
  endpoint admin{"127.0.0.1", 9901};
  /// `admin: {listen: ..., token_file: ...}`: writes on the admin API (cancel, replay) need
  /// `Authorization: Bearer <the file's content>`; the file is read at each write. Empty: none.
  std::string admin_token_file;
  /// `admin.allowed_hosts`: names besides IP literals, localhost and the admin host by which the
  /// admin API may be addressed (`Host`); `.example.com` allows every name under it. Lower case.
  std::vector<std::string> admin_allowed_hosts;
  unsigned workers = 0;  ///< 0 = one per core
  duration drain_timeout = std::chrono::seconds(10);
  /// Reload when the --config file changes (checked every second), as SIGHUP does; for
  /// mounted configs (a Kubernetes ConfigMap) that change under a running process.
  bool watch_config = false;
  unknown_hosts_policy unknown_hosts = unknown_hosts_policy::allow;
  request_limits limits;
  dns_settings dns;
  policy defaults;
  std::vector<dependency> dependencies;
  /// `store:` — where handed-over calls are kept (async delivery, R-8).
  struct store_settings {
    /// `sqlite`: one file, one process. `postgres`: one database a fleet of sidecars shares.
    enum class kind { sqlite, postgres } type = kind::sqlite;
    std::string path = "/var/lib/rebound/rebound.db";
    /// postgres: a libpq connection string without the password, which is read from
    /// `password_file` at start.
    std::string dsn;
    std::string password_file;
    unsigned pool = 4;  ///< postgres: connections, each on a store thread of its own
    /** postgres: what sits between rebound and the database. `automatic` finds out at each
        connect (a pooler hands out a backend pid that is not the server's); `transaction`: a
        transaction-mode pooler (PgBouncer), so no prepared statements and no LISTEN; `none`:
        the server itself (or a session-mode pooler). */
    enum class pooler_mode { automatic, none, transaction } pooler = pooler_mode::automatic;
    /** postgres: how long a claimed task is held. Another instance takes it over once this
        ran out (its holder died mid-attempt), so it must outlast any attempt. */
    duration lease = std::chrono::seconds(60);
    /// How long a task that ended (delivered, cancelled, an alert exhausted) stays readable on
    /// the admin API before it is deleted; dead letters stay until replayed or deleted.
    duration retention = std::chrono::hours(24);
    /** What the store may hold (tasks, attempts, inbound keys and their answers), in bytes:
        past it a new task or key is refused with 507 and /readyz says so, until deliveries
        and retention make room. 0: no bound (the disk is the bound). */
    std::uint64_t max_size = std::uint64_t{1} << 30;
    bool configured = false;  ///< `store:` was written
    bool operator==(const store_settings&) const = default;
  } store;
  inbound_settings inbound;
  /// `alert: {webhook: URL}` — where a JSON notice of each dead letter is POSTed.
  /// Empty: none. The notice is itself delivered with retries, and never dead-lettered.
  std::string alert_webhook;
  /// `async:` — the entry of async delivery.
  /** `tracing:` (issue 34): spans of each request and attempt, exported as OTLP/HTTP JSON to
      `endpoint` (an OpenTelemetry Collector on 4318, or a hosted back end over https://). Off
      without one. What the YAML leaves out may come from OpenTelemetry's environment
      variables (config/otel_env.hpp). */
  struct tracing_settings {
    std::optional<service_url> endpoint;
    double sample_ratio = 1.0;  ///< of the traces rebound starts; a caller's sampled flag decides for its own
    bool follow_caller = true;  ///< false: the ratio decides every trace, a caller's too (OTEL_TRACES_SAMPLER)
    unsigned max_queue = 2048;  ///< spans waiting for export; more are dropped and counted
    duration timeout = std::chrono::seconds(5);  ///< one export, connect to answer
    std::string ca_file;  ///< PEM CAs an https:// endpoint is verified against; empty: the system store
    /// Sent with every export (an API key); from OTEL_EXPORTER_OTLP_(TRACES_)HEADERS only,
    /// never the YAML, and never shown by GET /config.
    std::vector<std::pair<std::string, std::string>> headers;
    std::vector<std::pair<std::string, std::string>> resource;  ///< OTEL_RESOURCE_ATTRIBUTES
    std::string service_name;  ///< service.name of the spans; empty: `service`
    bool operator==(const tracing_settings&) const = default;
  } tracing;

  struct async_settings {
    std::uint64_t max_body = 1 << 20;  ///< a larger body is refused with 413, nothing stored
    bool operator==(const async_settings&) const = default;
  } async;

  /** Whether calls are handed over: `store:` is set, or a policy's context is async, webhook
      or batch. Only then is the store opened; otherwise `Prefer: respond-async` is not
      honoured (RFC 7240 lets a server ignore a preference) and the call is forwarded. */
  bool hands_over() const;
  /// Whether the store is opened: calls are handed over, or inbound keys or events are kept.
  bool needs_store() const { return hands_over() || inbound.needs_store(); }

  /// Lower-cased `host` and `host:port` keys to an index into `dependencies`.
  std::unordered_map<std::string, std::size_t, retry::name_hash, std::equal_to<>> host_index;

  /// What the per-dependency guards are made from (retry/dependency_guard.hpp).
  retry::dependency_policies guarded() const;

  /** The dependency a request for `host`:`port` belongs to, or nullptr for an unknown host.
      `host:port` is tried before the bare host, both case-insensitively. */
  const dependency* find_dependency(std::string_view host, std::uint16_t port) const;
};

/// Built-in defaults: what `rebound` with no arguments runs with.
config default_config();

}  // namespace rebound::config
