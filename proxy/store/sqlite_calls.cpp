#include "proxy/store/sqlite_store.hpp"

#include "proxy/store/sqlite_database.hpp"
#include "proxy/store/statements.hpp"
#include "proxy/store/store_support.hpp"

#include <algorithm>

// The calls of the store contract on SQLite: each runs on the store's thread inside the
// transaction its group shares (sqlite_store.cpp: run), in a savepoint where it writes twice.
namespace rebound::store {

using detail::database;
using detail::read_rows;
using detail::savepoint;
using detail::statement;
using support::answer;
using support::decode_headers;
using support::encode_headers;
using support::failure;
using support::from_ms;
using support::to_ms;

namespace {

template <class T>
using callback = task_store::callback<T>;

/// The store contract's statements, in SQLite's dialect (statements.cpp).
const sql::statements& q() { return sql::statements_for(sql::dialect::sqlite); }

retry_task read_task(const statement& s) {
  retry_task t;
  t.id = s.text(0);
  t.idempotency_key = s.text(1);
  t.dependency = s.text(2);
  t.method = s.text(3);
  t.target = s.text(4);
  t.headers = decode_headers(s.text(5));
  t.body = s.text(6);
  t.policy_id = s.text(7);
  t.attempts = static_cast<unsigned>(s.integer(8));
  t.next_attempt_at = from_ms(s.integer(9));
  t.created_at = from_ms(s.integer(10));
  t.status = parse_task_status(s.text(11)).value_or(task_status::pending);
  auto const window = s.integer(12);
  t.window_start = window > 0 ? from_ms(window) : t.created_at;
  t.attempts_before = static_cast<unsigned>(s.integer(13));
  return t;
}

/// Binds a task_filter to the parameters of q().list ($1 to $6).
void bind_filter(statement& s, const task_filter& f, task_status status) {
  s.bind(1, to_string(status)).bind(2, f.dependency);
  s.bind(3, f.since ? to_ms(*f.since) : std::int64_t{-1}).bind(4, f.until ? to_ms(*f.until) : std::int64_t{-1});
  s.bind(5, f.after).bind(6, static_cast<std::int64_t>(f.limit));
}

}  // namespace

void sqlite_store::submit_accept(retry_task task, callback<bool> done) {
  enqueue([this, task = std::move(task), done = std::move(done)](database& db) {
    if (!task.beyond_max_size)
      if (auto full = refuse_new(db)) return answer<bool>(done, std::move(full), false);
    auto insert = db.prepare(q().accept);
    insert.bind(1, task.id).bind(2, task.idempotency_key).bind(3, task.dependency).bind(4, task.method);
    insert.bind(5, task.target).bind_blob(6, encode_headers(task.headers)).bind_blob(7, task.body);
    insert.bind(8, task.policy_id).bind(9, static_cast<std::int64_t>(task.attempts));
    insert.bind(10, to_ms(task.next_attempt_at)).bind(11, to_ms(task.created_at)).bind(12, to_string(task.status));
    // One task refused (a duplicate id) fails alone: the statement, not the transaction, aborts.
    if (!insert.run()) return answer<bool>(done, write_failed(db, insert.error()), false);
    db.moved(std::nullopt, task.status);
    db.made_due = true;
    return answer<bool>(done, std::nullopt, true);
  });
}

void sqlite_store::submit_claim(std::string owner, wall_clock::time_point now, wall_clock::time_point lease_until,
                                std::size_t limit, callback<std::vector<retry_task>> done) {
  enqueue([owner = std::move(owner), now, lease_until, limit, done = std::move(done)](database& db) {
    std::vector<retry_task> out;
    for (auto const* sql : {&q().claim_expired, &q().claim_due}) {
      if (out.size() >= limit) break;
      auto s = db.prepare(*sql);
      s.bind(1, owner).bind(2, to_ms(lease_until)).bind(3, to_ms(now));
      s.bind(4, static_cast<std::int64_t>(limit - out.size()));
      auto const before = out.size();
      if (!read_rows(s, out, read_task)) return failure<std::vector<retry_task>>(done, s.error());
      if (sql == &q().claim_due)
        db.moved(task_status::pending, task_status::in_flight, static_cast<std::int64_t>(out.size() - before));
    }
    for (auto& t : out) t.status = task_status::in_flight;
    return answer<std::vector<retry_task>>(done, std::nullopt, std::move(out));
  });
}

void sqlite_store::submit_finish_attempt(std::string owner, attempt_log attempt, task_status next,
                                         wall_clock::time_point next_attempt_at, callback<bool> done) {
  enqueue([owner = std::move(owner), attempt = std::move(attempt), next, next_attempt_at,
           done = std::move(done)](database& db) {
    savepoint sp(db);
    if (!sp.ok()) return failure<bool>(done, db.error());
    auto update = db.prepare(q().finish_attempt);
    update.bind(1, to_string(next)).bind(2, static_cast<std::int64_t>(attempt.number));
    update.bind(3, to_ms(next_attempt_at)).bind(4, attempt.task_id).bind(5, owner);
    if (!update.run()) return failure<bool>(done, update.error());
    if (db.changes() == 0) return answer<bool>(done, std::nullopt, false);  // the lease was lost
    auto log = db.prepare(q().log_attempt);
    log.bind(1, attempt.task_id).bind(2, static_cast<std::int64_t>(attempt.number)).bind(3, to_ms(attempt.at));
    log.bind(4, static_cast<std::int64_t>(attempt.status)).bind(5, attempt.error_type);
    log.bind(6, static_cast<std::int64_t>(attempt.duration.count()));
    if (!log.run()) return failure<bool>(done, log.error());
    sp.keep();
    db.moved(task_status::in_flight, next);
    return answer<bool>(done, std::nullopt, true);
  });
}

void sqlite_store::submit_postpone(std::string owner, std::string id, wall_clock::time_point until,
                                   callback<bool> done) {
  enqueue([owner = std::move(owner), id = std::move(id), until, done = std::move(done)](database& db) {
    auto s = db.prepare(q().postpone);
    s.bind(1, to_ms(until)).bind(2, id).bind(3, owner);
    if (!s.run()) return failure<bool>(done, s.error());
    if (db.changes() == 0) return answer<bool>(done, std::nullopt, false);
    db.moved(task_status::in_flight, task_status::pending);
    return answer<bool>(done, std::nullopt, true);
  });
}

void sqlite_store::submit_renew_lease(std::string owner, std::string id, wall_clock::time_point lease_until,
                                      callback<bool> done) {
  enqueue([owner = std::move(owner), id = std::move(id), lease_until, done = std::move(done)](database& db) {
    auto s = db.prepare(q().renew_lease);
    s.bind(1, to_ms(lease_until)).bind(2, id).bind(3, owner);
    if (!s.run()) return failure<bool>(done, s.error());
    return answer<bool>(done, std::nullopt, db.changes() > 0);
  });
}

void sqlite_store::submit_get(std::string id, callback<std::optional<retry_task>> done) {
  enqueue([id = std::move(id), done = std::move(done)](database& db) {
    auto s = db.prepare(q().get_task);
    s.bind(1, id);
    auto const rc = s.step();
    if (rc == SQLITE_ROW) return answer<std::optional<retry_task>>(done, std::nullopt, read_task(s));
    if (rc == SQLITE_DONE) return answer<std::optional<retry_task>>(done, std::nullopt, std::nullopt);
    return failure<std::optional<retry_task>>(done, s.error());
  });
}

void sqlite_store::submit_attempts(std::string id, unsigned after, std::size_t limit,
                                   callback<std::vector<attempt_log>> done) {
  enqueue([id = std::move(id), after, limit, done = std::move(done)](database& db) {
    auto s = db.prepare(q().attempts);
    s.bind(1, id).bind(2, static_cast<std::int64_t>(after)).bind(3, static_cast<std::int64_t>(limit));
    std::vector<attempt_log> out;
    bool const ok = read_rows(s, out, [&id](const statement& r) {
      return attempt_log{
          id,        static_cast<unsigned>(r.integer(0)),    from_ms(r.integer(1)), static_cast<unsigned>(r.integer(2)),
          r.text(3), std::chrono::microseconds(r.integer(4))};
    });
    if (!ok) return failure<std::vector<attempt_log>>(done, s.error());
    return answer<std::vector<attempt_log>>(done, std::nullopt, std::move(out));
  });
}

void sqlite_store::submit_list(task_filter filter, callback<std::vector<retry_task>> done) {
  enqueue([filter = std::move(filter), done = std::move(done)](database& db) {
    auto s = db.prepare(q().list);
    bind_filter(s, filter, filter.status);
    std::vector<retry_task> out;
    if (!read_rows(s, out, read_task)) return failure<std::vector<retry_task>>(done, s.error());
    return answer<std::vector<retry_task>>(done, std::nullopt, std::move(out));
  });
}

void sqlite_store::submit_replay(std::string id, wall_clock::time_point now, callback<bool> done) {
  enqueue([id = std::move(id), now, done = std::move(done)](database& db) {
    auto s = db.prepare(q().replay);
    s.bind(1, id).bind(2, to_ms(now));
    if (!s.run()) return failure<bool>(done, s.error());
    if (db.changes() == 0) return answer<bool>(done, std::nullopt, false);
    db.moved(task_status::dead_lettered, task_status::pending);
    db.made_due = true;
    return answer<bool>(done, std::nullopt, true);
  });
}

void sqlite_store::submit_replay_matching(task_filter filter, wall_clock::time_point now,
                                          callback<std::vector<std::string>> done) {
  enqueue([filter = std::move(filter), now, done = std::move(done)](database& db) {
    auto s = db.prepare(q().replay_matching);
    bind_filter(s, filter, task_status::dead_lettered);
    s.bind(7, to_ms(now));
    std::vector<std::string> ids;
    if (!read_rows(s, ids, [](const statement& r) { return r.text(0); }))
      return failure<std::vector<std::string>>(done, s.error());
    db.moved(task_status::dead_lettered, task_status::pending, static_cast<std::int64_t>(ids.size()));
    db.made_due = db.made_due || !ids.empty();
    std::sort(ids.begin(), ids.end());  // RETURNING keeps no order; the cursor is the last id
    return answer<std::vector<std::string>>(done, std::nullopt, std::move(ids));
  });
}

void sqlite_store::submit_cancel(std::string id, wall_clock::time_point now, callback<bool> done) {
  enqueue([id = std::move(id), now, done = std::move(done)](database& db) {
    // next_attempt_at becomes when it ended, as for every finished task (submit_purge).
    auto s = db.prepare(q().cancel);
    s.bind(1, id).bind(2, to_ms(now));
    if (!s.run()) return failure<bool>(done, s.error());
    if (db.changes() == 0) return answer<bool>(done, std::nullopt, false);
    db.moved(task_status::pending, task_status::cancelled);
    return answer<bool>(done, std::nullopt, true);
  });
}

void sqlite_store::submit_delete_dead_letter(std::string id, callback<bool> done) {
  enqueue([id = std::move(id), done = std::move(done)](database& db) {
    savepoint sp(db);
    if (!sp.ok()) return failure<bool>(done, db.error());
    auto task = db.prepare(q().delete_dead_letter);
    auto logs = db.prepare(q().delete_attempts_of);
    logs.bind(1, id);
    task.bind(1, id);
    // Its attempts first: they refer to the task.
    if (!logs.run()) return failure<bool>(done, logs.error());
    if (!task.run()) return failure<bool>(done, task.error());
    if (db.changes() == 0) return answer<bool>(done, std::nullopt, false);  // the logs come back with the rollback
    sp.keep();
    db.moved(task_status::dead_lettered, std::nullopt);
    return answer<bool>(done, std::nullopt, true);
  });
}

void sqlite_store::submit_counts(callback<status_counts> done) {
  enqueue([done = std::move(done)](database& db) {
    return answer<status_counts>(done, std::nullopt, db.counts());  // as of the last commit
  });
}

void sqlite_store::submit_backlog(wall_clock::time_point before, callback<backlog> done) {
  enqueue([before, done = std::move(done)](database& db) {
    auto s = db.prepare(q().backlog);
    s.bind(1, to_ms(before));
    if (s.step() != SQLITE_ROW) return failure<backlog>(done, s.error());
    backlog b{static_cast<std::uint64_t>(s.integer(0)), std::nullopt};
    if (auto const oldest = s.integer(1); oldest > 0) b.oldest = from_ms(oldest);
    return answer<backlog>(done, std::nullopt, b);
  });
}

void sqlite_store::submit_purge(wall_clock::time_point ended_before, std::size_t limit, callback<std::uint64_t> done) {
  enqueue([ended_before, limit, done = std::move(done)](database& db) {
    savepoint sp(db);
    if (!sp.ok()) return failure<std::uint64_t>(done, db.error());
    // A finished task's next_attempt_at is when it ended. Its attempts go first: they refer to it.
    std::uint64_t purged = 0;
    for (auto st : {task_status::succeeded, task_status::cancelled, task_status::exhausted}) {
      if (purged >= limit) break;
      auto logs = db.prepare(q().purge_attempts);
      auto tasks = db.prepare(q().purge_tasks);
      for (auto* s : {&logs, &tasks}) {
        s->bind(1, to_string(st)).bind(2, to_ms(ended_before)).bind(3, static_cast<std::int64_t>(limit - purged));
        if (!s->run()) return failure<std::uint64_t>(done, s->error());
      }
      auto const n = static_cast<std::uint64_t>(db.changes());
      db.moved(st, std::nullopt, static_cast<std::int64_t>(n));
      purged += n;
    }
    sp.keep();
    return answer<std::uint64_t>(done, std::nullopt, purged);
  });
}

void sqlite_store::submit_put_policy(stored_policy p, callback<policy_put> done) {
  enqueue([p = std::move(p), done = std::move(done)](database& db) {
    auto insert = db.prepare(q().put_policy);
    insert.bind(1, p.id).bind(2, p.spec).bind(3, to_ms(p.created_at));
    if (!insert.run()) return failure<policy_put>(done, insert.error());
    if (db.changes() > 0) return answer<policy_put>(done, std::nullopt, policy_put::created);
    auto existing = db.prepare(q().policy_spec);
    existing.bind(1, p.id);
    if (existing.step() != SQLITE_ROW) return failure<policy_put>(done, existing.error());
    return answer<policy_put>(done, std::nullopt,
                              existing.text(0) == p.spec ? policy_put::unchanged : policy_put::conflict);
  });
}

void sqlite_store::submit_get_policy(std::string id, callback<std::optional<stored_policy>> done) {
  enqueue([id = std::move(id), done = std::move(done)](database& db) {
    auto s = db.prepare(q().get_policy);
    s.bind(1, id);
    auto const rc = s.step();
    if (rc == SQLITE_ROW)
      return answer<std::optional<stored_policy>>(done, std::nullopt,
                                                  stored_policy{id, s.text(0), from_ms(s.integer(1))});
    if (rc == SQLITE_DONE) return answer<std::optional<stored_policy>>(done, std::nullopt, std::nullopt);
    return failure<std::optional<stored_policy>>(done, s.error());
  });
}

void sqlite_store::submit_claim_key(std::string scope_key, std::string fingerprint, wall_clock::time_point now,
                                    wall_clock::time_point lease_until, callback<key_claim> done) {
  enqueue([this, scope_key = std::move(scope_key), fingerprint = std::move(fingerprint), now, lease_until,
           done = std::move(done)](database& db) {
    auto s = db.prepare(q().find_key);
    s.bind(1, scope_key);
    auto const rc = s.step();
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return failure<key_claim>(done, s.error());
    key_claim found;
    bool free = rc == SQLITE_DONE;
    if (!free) {
      bool const pending = s.text(1) == "pending";
      // An expired answer, or a holder whose lease ran out (it crashed): the key is free again.
      free = pending ? s.integer(2) <= to_ms(now) : s.integer(3) <= to_ms(now);
      if (!free) {
        if (s.text(0) != fingerprint)
          found.state = key_state::mismatch;
        else if (pending)
          found.state = key_state::in_flight;
        else
          found = key_claim{key_state::replay,
                            pinned_response{static_cast<unsigned>(s.integer(4)), decode_headers(s.text(5)), s.text(6)}};
      }
    }
    if (!free) return answer<key_claim>(done, std::nullopt, std::move(found));
    // A key already held or answered is found above even when the store is full: only a
    // new claim needs room.
    if (auto full = refuse_new(db)) return answer<key_claim>(done, std::move(full), key_claim{});
    auto claim = db.prepare(q().reclaim_key);
    claim.bind(1, scope_key).bind(2, fingerprint).bind(3, to_ms(lease_until));
    if (!claim.run()) return answer<key_claim>(done, write_failed(db, claim.error()), key_claim{});
    return answer<key_claim>(done, std::nullopt, key_claim{});
  });
}

void sqlite_store::submit_complete_key(std::string scope_key, pinned_response r, wall_clock::time_point expires_at,
                                       callback<bool> done) {
  enqueue([scope_key = std::move(scope_key), r = std::move(r), expires_at, done = std::move(done)](database& db) {
    auto s = db.prepare(q().complete_key);
    s.bind(1, scope_key).bind(2, to_ms(expires_at)).bind(3, static_cast<std::int64_t>(r.status));
    s.bind_blob(4, encode_headers(r.headers)).bind_blob(5, r.body);
    if (!s.run()) return failure<bool>(done, s.error());
    return answer<bool>(done, std::nullopt, db.changes() > 0);
  });
}

void sqlite_store::submit_release_key(std::string scope_key, callback<bool> done) {
  enqueue([scope_key = std::move(scope_key), done = std::move(done)](database& db) {
    auto s = db.prepare(q().release_key);
    s.bind(1, scope_key);
    if (!s.run()) return failure<bool>(done, s.error());
    return answer<bool>(done, std::nullopt, db.changes() > 0);
  });
}

void sqlite_store::submit_purge_keys(wall_clock::time_point now, std::size_t limit, callback<std::uint64_t> done) {
  enqueue([now, limit, done = std::move(done)](database& db) {
    auto s = db.prepare(q().purge_keys);
    s.bind(1, to_ms(now)).bind(2, static_cast<std::int64_t>(limit));
    if (!s.run()) return failure<std::uint64_t>(done, s.error());
    return answer<std::uint64_t>(done, std::nullopt, static_cast<std::uint64_t>(db.changes()));
  });
}

}  // namespace rebound::store
