#include "proxy/store/sql_store.hpp"

#include <algorithm>

// The calls of the store contract, once for both backends: each runs on a store thread inside
// the transaction its group shares (sqlite_store.cpp: run, postgres_store.cpp: run_group).
namespace rebound::store {

using sql::bytes;
using sql::number;
using sql::rows;
using sql::session;
using sql::text;
using support::answer;
using support::decode_headers;
using support::encode_headers;
using support::failure;
using support::from_ms;
using support::to_ms;

namespace {

retry_task read_task(const rows& r, std::size_t row) {
  retry_task t;
  t.id = r.text(row, 0);
  t.idempotency_key = r.text(row, 1);
  t.dependency = r.text(row, 2);
  t.method = r.text(row, 3);
  t.target = r.text(row, 4);
  t.headers = decode_headers(r.text(row, 5));
  t.body = r.text(row, 6);
  t.policy_id = r.text(row, 7);
  t.attempts = static_cast<unsigned>(r.integer(row, 8));
  t.next_attempt_at = from_ms(r.integer(row, 9));
  t.created_at = from_ms(r.integer(row, 10));
  t.status = parse_task_status(r.text(row, 11)).value_or(task_status::pending);
  auto const window = r.integer(row, 12);
  t.window_start = window > 0 ? from_ms(window) : t.created_at;
  t.attempts_before = static_cast<unsigned>(r.integer(row, 13));
  return t;
}

void read_tasks(const rows& r, std::vector<retry_task>& out) {
  for (std::size_t i = 0; i < r.size(); ++i) out.push_back(read_task(r, i));
}

/// A task_filter as the parameters of q().list ($1 to $6).
std::vector<sql::value> filter_params(const task_filter& f, task_status status) {
  return {text(to_string(status)),
          text(f.dependency),
          number(f.since ? to_ms(*f.since) : -1),
          number(f.until ? to_ms(*f.until) : -1),
          text(f.after),
          number(static_cast<std::int64_t>(f.limit))};
}

/// What a claimed key holds when it is not free: another payload, a request under way, or a
/// kept answer. Nothing: it is free (expired, or its holder's lease ran out: a crash).
std::optional<key_claim> held_claim(const rows& r, const std::string& fingerprint, wall_clock::time_point now) {
  if (r.empty()) return std::nullopt;
  bool const pending = r.text(0, 1) == "pending";
  bool const free = pending ? r.integer(0, 2) <= to_ms(now) : r.integer(0, 3) <= to_ms(now);
  if (free) return std::nullopt;
  if (r.text(0, 0) != fingerprint) return key_claim{key_state::mismatch, {}};
  if (pending) return key_claim{key_state::in_flight, {}};
  return key_claim{key_state::replay,
                   pinned_response{static_cast<unsigned>(r.integer(0, 4)), decode_headers(r.text(0, 5)), r.text(0, 6)}};
}

}  // namespace

const sql::statements& sql_store::q() const { return sql::statements_for(dialect_); }

template <class T, class Work>
void sql_store::queue(callback<T> done, Work work) {
  enqueue(call{[done, work](session& s) { return work(s, done); }, [done](const store_error& e) { done(e, T{}); }});
}

void sql_store::submit_accept(retry_task task, callback<bool> done) {
  queue<bool>(std::move(done), [this, task = std::move(task)](session& s, const callback<bool>& done) {
    if (!task.beyond_max_size)
      if (auto refused = s.refuse_new()) return answer<bool>(done, std::move(refused), false);
    // One task refused (a duplicate id) fails alone: SQLite aborts the statement, PostgreSQL
    // the transaction, which its backend then runs call by call.
    auto r = s.run(q().accept, {text(task.id), text(task.idempotency_key), text(task.dependency), text(task.method),
                                text(task.target), bytes(encode_headers(task.headers)), bytes(task.body),
                                text(task.policy_id), number(task.attempts), number(to_ms(task.next_attempt_at)),
                                number(to_ms(task.created_at)), text(to_string(task.status))});
    if (!r) return answer<bool>(done, s.write_failed(s.error()), false);
    s.moved(std::nullopt, task.status);
    s.made_due();
    return answer<bool>(done, std::nullopt, true);
  });
}

void sql_store::submit_claim(std::string owner, wall_clock::time_point now, wall_clock::time_point lease_until,
                             std::size_t limit, callback<std::vector<retry_task>> done) {
  using tasks = std::vector<retry_task>;
  queue<tasks>(std::move(done),
               [this, owner = std::move(owner), now, lease_until, limit](session& s, const callback<tasks>& done) {
                 if (!s.keep_size_current()) return failure<tasks>(done, s.error());
                 // The leases that ran out first, then the due tasks. In PostgreSQL, SKIP LOCKED passes over
                 // rows another instance is claiming right now: a fleet's claims never queue behind each other.
                 tasks out;
                 for (auto const* sql : {&q().claim_expired, &q().claim_due}) {
                   if (out.size() >= limit) break;
                   auto r = s.run(*sql, {text(owner), number(to_ms(lease_until)), number(to_ms(now)),
                                         number(static_cast<std::int64_t>(limit - out.size()))});
                   if (!r) return failure<tasks>(done, s.error());
                   read_tasks(*r, out);
                   if (sql == &q().claim_due)
                     s.moved(task_status::pending, task_status::in_flight, static_cast<std::int64_t>(r->size()));
                 }
                 for (auto& t : out) t.status = task_status::in_flight;
                 return answer<tasks>(done, std::nullopt, std::move(out));
               });
}

void sql_store::submit_finish_attempt(std::string owner, attempt_log attempt, task_status next,
                                      wall_clock::time_point next_attempt_at, callback<bool> done) {
  queue<bool>(std::move(done), [this, owner = std::move(owner), attempt = std::move(attempt), next, next_attempt_at](
                                   session& s, const callback<bool>& done) {
    if (!s.begin_call()) return failure<bool>(done, s.error());
    auto u = s.run(q().finish_attempt, {text(to_string(next)), number(attempt.number), number(to_ms(next_attempt_at)),
                                        text(attempt.task_id), text(owner)});
    bool const held = u && u->changes() > 0;  // else the lease was lost (or the update failed)
    bool const logged = held && s.run(q().log_attempt, {text(attempt.task_id), number(attempt.number),
                                                        number(to_ms(attempt.at)), number(attempt.status),
                                                        text(attempt.error_type), number(attempt.duration.count())});
    s.end_call(logged);
    if (!u || (held && !logged)) return failure<bool>(done, s.error());
    if (!held) return answer<bool>(done, std::nullopt, false);
    s.moved(task_status::in_flight, next);
    return answer<bool>(done, std::nullopt, true);
  });
}

void sql_store::submit_postpone(std::string owner, std::string id, wall_clock::time_point until, callback<bool> done) {
  queue<bool>(std::move(done),
              [this, owner = std::move(owner), id = std::move(id), until](session& s, const callback<bool>& done) {
                auto u = s.run(q().postpone, {number(to_ms(until)), text(id), text(owner)});
                if (!u) return failure<bool>(done, s.error());
                if (u->changes() == 0) return answer<bool>(done, std::nullopt, false);
                s.moved(task_status::in_flight, task_status::pending);
                return answer<bool>(done, std::nullopt, true);
              });
}

void sql_store::submit_renew_lease(std::string owner, std::string id, wall_clock::time_point lease_until,
                                   callback<bool> done) {
  queue<bool>(std::move(done), [this, owner = std::move(owner), id = std::move(id), lease_until](
                                   session& s, const callback<bool>& done) {
    auto u = s.run(q().renew_lease, {number(to_ms(lease_until)), text(id), text(owner)});
    if (!u) return failure<bool>(done, s.error());
    return answer<bool>(done, std::nullopt, u->changes() > 0);
  });
}

void sql_store::submit_get(std::string id, callback<std::optional<retry_task>> done) {
  using found = std::optional<retry_task>;
  queue<found>(std::move(done), [this, id = std::move(id)](session& s, const callback<found>& done) {
    auto r = s.run(q().get_task, {text(id)});
    if (!r) return failure<found>(done, s.error());
    if (r->empty()) return answer<found>(done, std::nullopt, std::nullopt);
    return answer<found>(done, std::nullopt, read_task(*r, 0));
  });
}

void sql_store::submit_attempts(std::string id, unsigned after, std::size_t limit,
                                callback<std::vector<attempt_log>> done) {
  using logs = std::vector<attempt_log>;
  queue<logs>(std::move(done), [this, id = std::move(id), after, limit](session& s, const callback<logs>& done) {
    auto r = s.run(q().attempts, {text(id), number(after), number(static_cast<std::int64_t>(limit))});
    if (!r) return failure<logs>(done, s.error());
    logs out;
    for (std::size_t i = 0; i < r->size(); ++i)
      out.push_back(attempt_log{id, static_cast<unsigned>(r->integer(i, 0)), from_ms(r->integer(i, 1)),
                                static_cast<unsigned>(r->integer(i, 2)), r->text(i, 3),
                                std::chrono::microseconds(r->integer(i, 4))});
    return answer<logs>(done, std::nullopt, std::move(out));
  });
}

void sql_store::submit_list(task_filter filter, callback<std::vector<retry_task>> done) {
  using tasks = std::vector<retry_task>;
  queue<tasks>(std::move(done), [this, filter = std::move(filter)](session& s, const callback<tasks>& done) {
    auto r = s.run(q().list, filter_params(filter, filter.status));
    if (!r) return failure<tasks>(done, s.error());
    tasks out;
    read_tasks(*r, out);
    return answer<tasks>(done, std::nullopt, std::move(out));
  });
}

void sql_store::submit_replay(std::string id, wall_clock::time_point now, callback<bool> done) {
  queue<bool>(std::move(done), [this, id = std::move(id), now](session& s, const callback<bool>& done) {
    auto u = s.run(q().replay, {text(id), number(to_ms(now))});
    if (!u) return failure<bool>(done, s.error());
    if (u->changes() == 0) return answer<bool>(done, std::nullopt, false);
    s.moved(task_status::dead_lettered, task_status::pending);
    s.made_due();
    return answer<bool>(done, std::nullopt, true);
  });
}

void sql_store::submit_replay_matching(task_filter filter, wall_clock::time_point now,
                                       callback<std::vector<std::string>> done) {
  using ids = std::vector<std::string>;
  queue<ids>(std::move(done), [this, filter = std::move(filter), now](session& s, const callback<ids>& done) {
    auto params = filter_params(filter, task_status::dead_lettered);
    params.push_back(number(to_ms(now)));
    auto r = s.run(q().replay_matching, params);
    if (!r) return failure<ids>(done, s.error());
    ids out;
    for (std::size_t i = 0; i < r->size(); ++i) out.push_back(r->text(i, 0));
    std::sort(out.begin(), out.end());  // RETURNING keeps no order; the cursor is the last id
    s.moved(task_status::dead_lettered, task_status::pending, static_cast<std::int64_t>(out.size()));
    if (!out.empty()) s.made_due();
    return answer<ids>(done, std::nullopt, std::move(out));
  });
}

void sql_store::submit_cancel(std::string id, wall_clock::time_point now, callback<bool> done) {
  queue<bool>(std::move(done), [this, id = std::move(id), now](session& s, const callback<bool>& done) {
    // next_attempt_at becomes when it ended, as for every finished task (submit_purge).
    auto u = s.run(q().cancel, {text(id), number(to_ms(now))});
    if (!u) return failure<bool>(done, s.error());
    if (u->changes() == 0) return answer<bool>(done, std::nullopt, false);
    s.moved(task_status::pending, task_status::cancelled);
    return answer<bool>(done, std::nullopt, true);
  });
}

void sql_store::submit_delete_dead_letter(std::string id, callback<bool> done) {
  queue<bool>(std::move(done), [this, id = std::move(id)](session& s, const callback<bool>& done) {
    if (!s.begin_call()) return failure<bool>(done, s.error());
    // Its attempts first where they do not go with it: they refer to the task.
    bool const logs_gone = q().attempts_cascade || s.run(q().delete_attempts_of, {text(id)});
    auto u = logs_gone ? s.run(q().delete_dead_letter, {text(id)}) : std::nullopt;
    bool const deleted = u && u->changes() > 0;
    s.end_call(deleted);  // none deleted: the attempts come back with the undo
    if (!u) return failure<bool>(done, s.error());
    if (deleted) s.moved(task_status::dead_lettered, std::nullopt);
    return answer<bool>(done, std::nullopt, deleted);
  });
}

void sql_store::submit_counts(callback<status_counts> done) {
  queue<status_counts>(std::move(done), [this](session& s, const callback<status_counts>& done) {
    if (auto kept = s.kept_counts()) return answer<status_counts>(done, std::nullopt, *kept);  // as of the last commit
    // Counted by the database on each call: a fleet moves tasks that this process never sees.
    auto r = s.run(q().count_by_status, {});
    if (!r) return failure<status_counts>(done, s.error());
    status_counts counts{};
    for (std::size_t i = 0; i < r->size(); ++i)
      if (auto st = parse_task_status(r->text(i, 0)))
        counts[static_cast<std::size_t>(*st)] = static_cast<std::uint64_t>(r->integer(i, 1));
    return answer<status_counts>(done, std::nullopt, counts);
  });
}

void sql_store::submit_backlog(wall_clock::time_point before, callback<backlog> done) {
  queue<backlog>(std::move(done), [this, before](session& s, const callback<backlog>& done) {
    auto r = s.run(q().backlog, {number(to_ms(before))});
    if (!r || r->empty()) return failure<backlog>(done, r ? "the backlog query gave no row" : s.error());
    backlog b{static_cast<std::uint64_t>(r->integer(0, 0)), std::nullopt};
    if (auto const oldest = r->integer(0, 1); oldest > 0) b.oldest = from_ms(oldest);
    return answer<backlog>(done, std::nullopt, b);
  });
}

void sql_store::submit_purge(wall_clock::time_point ended_before, std::size_t limit, callback<std::uint64_t> done) {
  queue<std::uint64_t>(std::move(done), [this, ended_before, limit](session& s, const callback<std::uint64_t>& done) {
    if (!s.begin_call()) return failure<std::uint64_t>(done, s.error());
    // A finished task's next_attempt_at is when it ended; a status at a time, each walking the
    // ended-task index in order. In PostgreSQL, SKIP LOCKED: every instance of a fleet purges,
    // and they split the rows instead of waiting. Attempts go first where they do not cascade.
    std::uint64_t purged = 0;
    for (auto st : {task_status::succeeded, task_status::cancelled, task_status::exhausted}) {
      if (purged >= limit) break;
      std::initializer_list<sql::value> which{text(to_string(st)), number(to_ms(ended_before)),
                                              number(static_cast<std::int64_t>(limit - purged))};
      bool const logs_gone = q().attempts_cascade || s.run(q().purge_attempts, which);
      auto u = logs_gone ? s.run(q().purge_tasks, which) : std::nullopt;
      if (!u) {
        s.end_call(false);
        return failure<std::uint64_t>(done, s.error());
      }
      s.moved(st, std::nullopt, static_cast<std::int64_t>(u->changes()));
      purged += u->changes();
    }
    s.end_call(true);
    return answer<std::uint64_t>(done, std::nullopt, purged);
  });
}

void sql_store::submit_put_policy(stored_policy p, callback<policy_put> done) {
  queue<policy_put>(std::move(done), [this, p = std::move(p)](session& s, const callback<policy_put>& done) {
    auto u = s.run(q().put_policy, {text(p.id), text(p.spec), number(to_ms(p.created_at))});
    if (!u) return failure<policy_put>(done, s.error());
    if (u->changes() > 0) return answer<policy_put>(done, std::nullopt, policy_put::created);
    auto r = s.run(q().policy_spec, {text(p.id)});
    if (!r || r->empty()) return failure<policy_put>(done, r ? "the policy vanished" : s.error());
    return answer<policy_put>(done, std::nullopt,
                              r->text(0, 0) == p.spec ? policy_put::unchanged : policy_put::conflict);
  });
}

void sql_store::submit_get_policy(std::string id, callback<std::optional<stored_policy>> done) {
  using found = std::optional<stored_policy>;
  queue<found>(std::move(done), [this, id = std::move(id)](session& s, const callback<found>& done) {
    auto r = s.run(q().get_policy, {text(id)});
    if (!r) return failure<found>(done, s.error());
    if (r->empty()) return answer<found>(done, std::nullopt, std::nullopt);
    return answer<found>(done, std::nullopt, stored_policy{id, r->text(0, 0), from_ms(r->integer(0, 1))});
  });
}

void sql_store::submit_claim_key(std::string scope_key, std::string fingerprint, wall_clock::time_point now,
                                 wall_clock::time_point lease_until, callback<key_claim> done) {
  queue<key_claim>(std::move(done), [this, scope_key = std::move(scope_key), fingerprint = std::move(fingerprint), now,
                                     lease_until](session& s, const callback<key_claim>& done) {
    // Only a key that is new needs room; one held or answered is found whatever the size.
    if (s.full()) {
      auto r = s.run(q().key_known, {text(scope_key)});
      if (!r) return failure<key_claim>(done, s.error());
      if (r->empty())
        if (auto refused = s.refuse_new()) return answer<key_claim>(done, std::move(refused), key_claim{});
    }
    // Never seen: the insert takes it. Two instances of a fleet inserting at once: the second
    // waits for the first's commit and inserts nothing, then reads what the first holds.
    std::initializer_list<sql::value> claim{text(scope_key), text(fingerprint), number(to_ms(lease_until))};
    auto ins = s.run(q().insert_key, claim);
    if (!ins) return answer<key_claim>(done, s.write_failed(s.error()), key_claim{});
    if (ins->changes() > 0) return answer<key_claim>(done, std::nullopt, key_claim{});
    auto r = s.run(q().find_key, {text(scope_key)});
    if (!r) return failure<key_claim>(done, s.error());
    if (auto held = held_claim(*r, fingerprint, now)) return answer<key_claim>(done, std::nullopt, std::move(*held));
    if (!s.run(q().reclaim_key, claim)) return answer<key_claim>(done, s.write_failed(s.error()), key_claim{});
    return answer<key_claim>(done, std::nullopt, key_claim{});
  });
}

void sql_store::submit_complete_key(std::string scope_key, pinned_response r, wall_clock::time_point expires_at,
                                    callback<bool> done) {
  queue<bool>(std::move(done), [this, scope_key = std::move(scope_key), r = std::move(r), expires_at](
                                   session& s, const callback<bool>& done) {
    auto u = s.run(q().complete_key, {text(scope_key), number(to_ms(expires_at)), number(r.status),
                                      bytes(encode_headers(r.headers)), bytes(r.body)});
    if (!u) return failure<bool>(done, s.error());
    return answer<bool>(done, std::nullopt, u->changes() > 0);
  });
}

void sql_store::submit_release_key(std::string scope_key, callback<bool> done) {
  queue<bool>(std::move(done), [this, scope_key = std::move(scope_key)](session& s, const callback<bool>& done) {
    auto u = s.run(q().release_key, {text(scope_key)});
    if (!u) return failure<bool>(done, s.error());
    return answer<bool>(done, std::nullopt, u->changes() > 0);
  });
}

void sql_store::submit_purge_keys(wall_clock::time_point now, std::size_t limit, callback<std::uint64_t> done) {
  queue<std::uint64_t>(std::move(done), [this, now, limit](session& s, const callback<std::uint64_t>& done) {
    auto u = s.run(q().purge_keys, {number(to_ms(now)), number(static_cast<std::int64_t>(limit))});
    if (!u) return failure<std::uint64_t>(done, s.error());
    return answer<std::uint64_t>(done, std::nullopt, u->changes());
  });
}

}  // namespace rebound::store
