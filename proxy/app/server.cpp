#include "proxy/app/server.hpp"

#include "proxy/app/trace_export.hpp"

#include "proxy/observe/trace.hpp"

#include "proxy/app/worker.hpp"

#include "config/load.hpp"
#include "proxy/admin/admin_server.hpp"

#include <unistd.h>
#include "proxy/delivery/scheduler.hpp"
#include "proxy/store/postgres_store.hpp"
#include "proxy/store/sqlite_store.hpp"
#include "proxy/h2/client_connection.hpp"
#include "proxy/plan/loop_guard.hpp"
#include "proxy/runtime/retry_buffer.hpp"
#include "proxy/runtime/session_registry.hpp"
#include "proxy/net.hpp"
#include "proxy/http/relay.hpp"
#include "proxy/upstream/pool.hpp"
#include "proxy/upstream/resolver.hpp"
#include <ares.h>
#include "proxy/auth/secure_origins.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <optional>
#include <sstream>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace rebound::app {
namespace {

/// What the control thread shares with its signal handling.
struct control_state {
  std::vector<std::unique_ptr<worker>>& workers;
  admin::admin_state& admin;
  retry::guard_registry& guards;
  observe::logger& log;
  const run_options& options;
  std::shared_ptr<const auth::secure_origins> origins;  ///< the running config's
  net::io_context& control;                             ///< the admin API's loop
  observe::metrics& metrics;
};

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (auto const& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

/** SIGHUP (SPEC 1): load and check the file again. A valid file takes over for new requests
    (in-flight ones finish on the config they started with); an invalid one changes nothing
    and is logged. Keys bound at start-up keep their running values until a restart. */
void reload(control_state& cs) {
  auto& log = cs.log;
  auto const& path = cs.options.config_path;
  if (path.empty()) {
    log.error("config_reload_failed", {{"message", "no --config file: rebound runs on its built-in defaults"}});
    return;
  }
  config::config next;
  std::vector<config::diagnostic> warnings;
  try {
    next = config::load_config_file(path, &warnings);
  } catch (const std::exception& e) {  // config_error, with every finding; the old config serves on
    log.error("config_reload_failed", {{"file", path}, {"message", e.what()}});
    return;
  }
  for (auto const& w : warnings) log.warn("config_warning", {{"finding", config::to_string(w)}, {"rule", w.rule}});
  auto const& running = *cs.admin.cfg;
  std::vector<std::string> restart;
  auto pin = [&](auto config::config::*key, const char* name) {
    if (next.*key == running.*key) return;
    restart.push_back(name);
    next.*key = running.*key;
  };
  auto same_endpoint = [](const config::endpoint& a, const config::endpoint& b) {
    return a.host == b.host && a.port == b.port;
  };
  if (!same_endpoint(next.listen, running.listen)) restart.push_back("listen"), next.listen = running.listen;
  if (!same_endpoint(next.admin, running.admin)) restart.push_back("admin"), next.admin = running.admin;
  // The inbound listener is bound at start like the others; its routes and app change live.
  if (next.inbound.configured != running.inbound.configured ||
      !same_endpoint(next.inbound.listen, running.inbound.listen)) {
    restart.push_back("inbound.listen");
    next.inbound.configured = running.inbound.configured;
    next.inbound.listen = running.inbound.listen;
  }
  // Without a store opened at start, new keyed routes and async contexts cannot keep their
  // promise: the operator must hear it, not find requests forwarded plainly.
  if (next.needs_store() && !cs.admin.store) restart.push_back("store (opened at start-up only)");
  pin(&config::config::workers, "workers");
  pin(&config::config::store, "store");      // the file is opened (and locked) once, at start
  pin(&config::config::service, "service");  // the label of every metric series already made
  pin(&config::config::tracing, "tracing");  // its exporter starts with the process
  if (cs.options.log_level_pinned)
    next.log_level = running.log_level;
  else
    log.set_level(next.log_level);

  auto const current = std::make_shared<const config::config>(std::move(next));
  std::shared_ptr<const auth::secure_origins> origins;
  try {
    origins = std::make_shared<const auth::secure_origins>(*current, &log, cs.origins.get());
  } catch (const std::exception& e) {  // a CA bundle or key that does not load: the old config serves on
    log.error("config_reload_failed", {{"file", path}, {"message", e.what()}});
    return;
  }
  auto const report = cs.guards.reconfigure(current->guarded());
  auto const next_running = std::make_shared<const runtime::running_config>(runtime::running_config{current, origins});
  for (auto& w : cs.workers) {
    worker* wp = w.get();
    net::post(wp->ioc, [wp, next_running, &log = cs.log, &metrics = cs.metrics] {
      wp->running = next_running;
      wp->guards->clear();
      net::use_service<upstream::resolver_service>(wp->ioc).configure(next_running->cfg->dns, &log, &metrics);
    });
  }
  net::use_service<upstream::resolver_service>(cs.control).configure(current->dns, &cs.log, &cs.metrics);
  cs.admin.cfg = current;
  cs.origins = origins;
  log.info("config_reloaded", {{"file", path},
                               {"dependencies", current->dependencies.size()},
                               {"kept", joined(report.kept)},
                               {"reset", joined(report.reset)},
                               {"added", joined(report.added)},
                               {"removed", joined(report.removed)}});
  if (!restart.empty())
    log.warn("config_restart_needed",
             {{"keys", joined(restart)},
              {"message", "changed keys bound at start-up keep their running values until a restart"}});
}

/// What identifies a version of the config file: a rewrite, a rename over it or a
/// re-pointed symlink (how a ConfigMap update lands) changes one of these.
struct file_stamp {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  timespec mtime{};
  bool operator==(const file_stamp& o) const {
    return exists == o.exists && dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
           mtime.tv_nsec == o.mtime.tv_nsec;
  }
};

file_stamp stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {true, st.st_dev, st.st_ino, st.st_size, st.st_mtim};
}

/** `watch_config: true`: reload when the file changes, as SIGHUP would. The file is looked
    at once a second; a change is acted on once it has held still for a tick, so a file
    still being written is not read half-way. */
net::awaitable<void> watch_config_file(net::io_context& control, control_state& cs) {
  if (cs.options.config_path.empty()) co_return;
  net::steady_timer tick(control);
  auto seen = stamp_of(cs.options.config_path);
  std::optional<file_stamp> pending;
  for (;;) {
    tick.expires_after(std::chrono::seconds(1));
    auto [ec] = co_await tick.async_wait(use_tuple);
    if (ec) co_return;
    if (!cs.admin.cfg->watch_config) {
      seen = stamp_of(cs.options.config_path);
      pending.reset();
      continue;
    }
    auto const now = stamp_of(cs.options.config_path);
    if (now == seen || !now.exists) {
      pending.reset();
      continue;
    }
    if (!pending || !(*pending == now)) {
      pending = now;  // changed: wait a tick for it to settle
      continue;
    }
    seen = now;
    pending.reset();
    cs.log.info("config_changed", {{"file", cs.options.config_path}});
    reload(cs);
  }
}

/** SIGHUP reloads; SIGTERM/SIGINT drain in two phases, as userver does it: readiness fails
    first, then the listeners close and busy connections finish their exchange, up to
    drain_timeout. */
net::awaitable<void> handle_signals(net::io_context& control, net::signal_set& signals, control_state& cs,
                                    tcp_acceptor& admin_acceptor) {
  auto& log = cs.log;
  auto& workers = cs.workers;
  auto& state = cs.admin;
  int sig = 0;
  for (;;) {
    auto [ec, s] = co_await signals.async_wait(use_tuple);
    if (ec) co_return;
    sig = s;
    if (sig != SIGHUP) break;
    reload(cs);
  }
  auto const& cfg = *state.cfg;
  state.ready = false;
  log.info("drain_started", {{"signal", sig}, {"drain_timeout_ms", static_cast<long long>(cfg.drain_timeout.count())}});
  for (auto& w : workers) {
    worker* wp = w.get();
    net::post(wp->ioc, [wp] {
      error_code ignored;
      wp->acceptor->close(ignored);
      if (wp->inbound_acceptor) wp->inbound_acceptor->close(ignored);
      wp->sessions.begin_drain();
    });
  }
  auto const deadline = std::chrono::steady_clock::now() + cfg.drain_timeout;
  net::steady_timer tick(control);
  std::size_t remaining = 0;
  for (;;) {
    remaining = 0;
    for (auto const& w : workers) remaining += w->sessions.active();
    if (remaining == 0 || std::chrono::steady_clock::now() >= deadline) break;
    tick.expires_after(std::chrono::milliseconds(20));
    co_await tick.async_wait(use_tuple);
  }
  log.info("drain_finished", {{"connections_cut", remaining}});
  error_code ignored;
  admin_acceptor.close(ignored);
  control.stop();
}

/// store.password_file's content, without the line end an editor leaves; a start-up error
/// when it cannot be read. The password itself is never logged.
std::string read_password(const std::string& path) {
  if (path.empty()) return {};
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw std::runtime_error("store.password_file " + path + " cannot be read");
  auto s = text.str();
  auto const end = s.find_last_not_of("\r\n");
  s.erase(end == std::string::npos ? 0 : end + 1);
  return s;
}

/** The store the config names. SQLite opens (and migrates) here, refusing start-up when it
    cannot; PostgreSQL connects in the background, so a database that is down leaves the
    proxy up and /readyz saying why. */
std::unique_ptr<store::task_store> open_store(const config::config& cfg, observe::metrics& metrics,
                                              observe::logger& log) {
  auto on_commit = [&metrics](std::chrono::nanoseconds took, std::size_t) { metrics.store_commit(took); };
  if (cfg.store.type != config::config::store_settings::kind::postgres)
    return std::make_unique<store::sqlite_store>(cfg.store.path, on_commit, cfg.store.max_size);
  store::postgres_store::options o;
  o.dsn = cfg.store.dsn;
  o.password = read_password(cfg.store.password_file);
  o.pool = cfg.store.pool;
  using pooler = config::config::store_settings::pooler_mode;
  o.pooler = cfg.store.pooler == pooler::none          ? store::postgres_store::pooler_mode::none
             : cfg.store.pooler == pooler::transaction ? store::postgres_store::pooler_mode::transaction
                                                       : store::postgres_store::pooler_mode::detect;
  o.on_pooled = [&log](const std::string& evidence) {
    log.info("store_pooled", {{"type", "postgres"},
                              {"message",
                               "a transaction-mode pooler is in between: statements go unnamed, no LISTEN "
                               "(idle instances poll about once a second)"},
                              {"evidence", evidence}});
  };
  o.max_size = cfg.store.max_size;
  o.on_commit = on_commit;
  o.on_state = [&log](const std::string& why) {
    if (why.empty())
      log.info("store_connected", {{"type", "postgres"}});
    else
      log.error("store_unavailable", {{"type", "postgres"}, {"message", why}});
  };
  return std::make_unique<store::postgres_store>(std::move(o));
}

/// Start-up: an admin token file that cannot be read refuses the start (throws).
void check_admin_token_file(const config::config& cfg, observe::logger& log) {
  if (cfg.admin_token_file.empty()) return;
  if (::access(cfg.admin_token_file.c_str(), R_OK) != 0)
    throw std::runtime_error("admin.token_file " + cfg.admin_token_file + " cannot be read");
  // A secret others can read is no secret: said at start, where an operator looks.
  if (struct stat st{}; ::stat(cfg.admin_token_file.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    log.warn("admin_token_file_exposed",
             {{"file", cfg.admin_token_file},
              {"message", "admin.token_file can be read by other users than its owner; chmod 600 it"}});
}

/** The workers, each with its listeners bound and its own resolver of upstream names
    (upstream/resolver.hpp). With port 0 the first bind picks the port and the others share
    it: `ep` and `inbound_ep` end as bound. */
std::vector<std::unique_ptr<worker>> make_workers(unsigned n, const config::config& cfg,
                                                  const std::shared_ptr<const runtime::running_config>& running,
                                                  retry::guard_registry& guards, observe::logger& log,
                                                  observe::metrics& metrics, tcp::endpoint& ep,
                                                  tcp::endpoint& inbound_ep) {
  std::vector<std::unique_ptr<worker>> workers;
  for (unsigned i = 0; i < n; ++i) {
    auto w = std::make_unique<worker>();
    w->guards.emplace(guards, i);
    w->running = running;
    w->acceptor.emplace(bind_listener(w->ioc, ep, true, "listen"));
    ep = w->acceptor->local_endpoint();
    if (cfg.inbound.configured) {
      w->inbound_acceptor.emplace(bind_listener(w->ioc, inbound_ep, true, "inbound.listen"));
      inbound_ep = w->inbound_acceptor->local_endpoint();
    }
    net::use_service<upstream::resolver_service>(w->ioc).configure(cfg.dns, &log, &metrics);
    workers.push_back(std::move(w));
  }
  return workers;
}

delivery::scheduler_options scheduler_options_for(const config::config& cfg, const std::string& instance_token,
                                                  observe::metrics& metrics) {
  delivery::scheduler_options so;
  so.owner = instance_token;
  so.seed = std::hash<std::string>{}(instance_token);
  so.metrics = &metrics;
  if (cfg.store.type == config::config::store_settings::kind::postgres) {
    // A fleet shares the queue: a lease is what hands a dead instance's tasks to the others,
    // and idle instances wait for a NOTIFY rather than poll the database hard.
    so.lease = std::chrono::duration_cast<std::chrono::seconds>(cfg.store.lease);
    so.poll = std::chrono::seconds(1);
  }
  return so;
}

/// What a worker runs: its accept loops (the proxy port, the inbound one), the scheduler when
/// it is the one that claims, and its pool's sweep.
void start_worker(worker& w, const runtime::session_context& ctx, const delivery::scheduler_options* scheduler,
                  std::size_t workers, observe::logger& log) {
  net::co_spawn(w.ioc, accept_loop(w, *w.acceptor, ctx), observe::report_failure{&log, "accept"});
  if (w.inbound_acceptor) {
    auto inbound_ctx = ctx;
    inbound_ctx.inbound = true;
    net::co_spawn(w.ioc, accept_loop(w, *w.inbound_acceptor, inbound_ctx), observe::report_failure{&log, "accept"});
  }
  if (scheduler)
    net::co_spawn(w.ioc, delivery::run_scheduler(ctx, *scheduler), observe::report_failure{&log, "delivery"});
  net::co_spawn(w.ioc, sweep_pool(w, workers), observe::report_failure{&log, "pool_sweep"});
}

/// Said once at start: the descriptor limit leaves room for fewer client connections than
/// limits.max_connections.
void warn_if_descriptors_clamp(const config::config& cfg, observe::logger& log) {
  auto const cap = descriptor_cap(nofile_limit());
  if (cap >= cfg.limits.max_connections) return;
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  log.warn("max_connections_clamped", {{"configured", cfg.limits.max_connections},
                                       {"effective", cap},
                                       {"nofile", static_cast<unsigned long long>(lim.rlim_cur)},
                                       {"message",
                                        "the descriptor limit leaves room for fewer client connections: "
                                        "two descriptors each, and a reserve for the admin port"}});
}

}  // namespace

int run(std::shared_ptr<const config::config> cfg, observe::logger& log, const run_options& options) {
  unsigned const n = cfg->workers ? cfg->workers : std::max(1u, std::thread::hardware_concurrency());
  // Before the workers: suspended sessions hold pointers to guards until their io_context dies.
  observe::metrics metrics(cfg->service);
  ares_library_init(ARES_LIB_INIT_ALL);                 // once, before any thread uses c-ares
  retry::guard_registry guards(cfg->guarded(), log, metrics, n);  // each worker its lane of a concurrency limit
  // Throws on a CA bundle or key that does not load: start-up is refused.
  auto const origins = std::make_shared<const auth::secure_origins>(*cfg, &log);
  auto const running = std::make_shared<const runtime::running_config>(runtime::running_config{cfg, origins});
  // Declared before the workers: their sessions, destroyed with the workers' io_contexts, use both.
  std::string const instance_token = plan::new_instance_token();
  std::atomic<std::size_t> open_connections{0};
  runtime::retry_buffer kept_bodies;
  // Opened only when the config hands calls over; throws (start-up refused) when it cannot be.
  std::unique_ptr<store::task_store> task_store;
  if (cfg->needs_store()) task_store = open_store(*cfg, metrics, log);
  // Declared before the workers: their requests record spans until their io_contexts die.
  std::unique_ptr<observe::tracer> tracer;
  if (cfg->tracing.endpoint)
    tracer = std::make_unique<observe::tracer>(
        app::trace_settings_for(*cfg), cfg->tracing.service_name.empty() ? cfg->service : cfg->tracing.service_name,
        &metrics);
  check_admin_token_file(*cfg, log);
  std::string admin_base;
  tcp::endpoint ep(net::ip::make_address(cfg->listen.host), cfg->listen.port);
  tcp::endpoint inbound_ep(net::ip::make_address(cfg->inbound.listen.host), cfg->inbound.listen.port);
  auto workers = make_workers(n, *cfg, running, guards, log, metrics, ep, inbound_ep);
  net::io_context control{1};
  net::use_service<upstream::resolver_service>(control).configure(cfg->dns, &log, &metrics);
  tcp_acceptor admin_acceptor =
      bind_listener(control, tcp::endpoint(net::ip::make_address(cfg->admin.host), cfg->admin.port), false, "admin");
  admin_base = "http://" + to_string(admin_acceptor.local_endpoint());
  admin::admin_state state;
  state.store = task_store.get();
  state.admin_base = admin_base;
  state.guards = &guards;
  state.metrics = &metrics;
  state.cfg = cfg;
  net::co_spawn(control, admin::run_admin_listener(admin_acceptor, state, log), observe::report_failure{&log, "admin"});
  net::signal_set signals(control, SIGINT, SIGTERM, SIGHUP);
  control_state cs{workers, state, guards, log, options, origins, control, metrics};
  net::co_spawn(control, handle_signals(control, signals, cs, admin_acceptor),
                observe::report_failure{&log, "signals"});
  net::co_spawn(control, watch_config_file(control, cs), observe::report_failure{&log, "watch_config"});
  net::co_spawn(control, return_freed_memory(control), observe::report_failure{&log, "trim"});

  auto const scheduler = scheduler_options_for(*cfg, instance_token, metrics);
  for (auto& w : workers) {
    runtime::session_context ctx{running,           &w->running,      &w->pool,    &log,
                                 &w->sessions,      &w->rng,          &*w->guards, instance_token,
                                 &open_connections, task_store.get(), admin_base};
    ctx.buffers = &w->buffers;
    ctx.h2_pool = &w->h2_pool;
    ctx.kept_bodies = &kept_bodies;
    ctx.tracer = tracer.get();
    // Deliveries run on the first worker: one scheduler claims for the process.
    bool const schedules = task_store && w == workers.front();
    start_worker(*w, ctx, schedules ? &scheduler : nullptr, workers.size(), log);
  }
  for (auto& w : workers) {
    worker* wp = w.get();
    wp->thread = std::thread([wp, &log] { run_guarded(wp->ioc, log, "worker"); });
  }
  state.ready = true;
  warn_if_descriptors_clamp(*cfg, log);
  log.info("listening", {{"listen", to_string(ep)},
                         {"inbound", cfg->inbound.configured ? to_string(inbound_ep) : std::string()},
                         {"admin", to_string(admin_acceptor.local_endpoint())},
                         {"workers", n},
                         {"version", REBOUND_VERSION}});
  run_guarded(control, log, "control");
  for (auto& w : workers) w->ioc.stop();
  for (auto& w : workers) w->thread.join();
  // Closed while the io_contexts it posts its completions to still exist (stopped, so they
  // are dropped): its destructor finishes the queued work first.
  task_store.reset();
  log.info("stopped", {{"log_lines_dropped", log.dropped()}});
  log.flush();
  return 0;
}

}  // namespace rebound::app
