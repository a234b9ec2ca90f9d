#include "proxy/store/postgres_store.hpp"

#include "proxy/store/postgres_connection.hpp"
#include "proxy/store/statements.hpp"
#include "proxy/store/store_support.hpp"

#include <algorithm>

// The calls of the store contract on PostgreSQL: each runs on a store thread inside the
// transaction its group shares (postgres_store.cpp: run_group).
namespace rebound::store {

using detail::bytes;
using detail::number;
using detail::param;
using detail::pg_connection;
using detail::pg_result;
using detail::text;
using support::answer;
using support::decode_headers;
using support::encode_headers;
using support::failure;
using support::from_ms;
using support::to_ms;

/// Queues `work` for a store thread; a call no connection could take fails with the reason.
template <class T, class Work>
void postgres_store::enqueue(callback<T> done, Work work) {
  push(job{[done, work](pg_connection& c) { return work(c, done); }, [done](const store_error& e) { done(e, T{}); }});
}

namespace {

retry_task read_task(const pg_result& r, int row) {
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

std::vector<retry_task> read_tasks(const pg_result& r) {
  std::vector<retry_task> out;
  for (int i = 0; i < r.rows(); ++i) out.push_back(read_task(r, i));
  return out;
}

/// The store contract's statements, in PostgreSQL's dialect (statements.cpp).
const sql::statements& q() { return sql::statements_for(sql::dialect::postgres); }

/// A task_filter as the parameters of q().list ($1 to $6).
std::vector<param> filter_params(const task_filter& f, task_status status) {
  return {text(to_string(status)),
          text(f.dependency),
          number(f.since ? to_ms(*f.since) : -1),
          number(f.until ? to_ms(*f.until) : -1),
          text(f.after),
          number(static_cast<std::int64_t>(f.limit))};
}

}  // namespace

void postgres_store::submit_accept(retry_task task, callback<bool> done) {
  enqueue<bool>(std::move(done), [this, task = std::move(task)](pg_connection& c, const callback<bool>& done) {
    if (!task.beyond_max_size)
      if (auto refused = refuse_new(c)) return answer<bool>(done, std::move(refused), false);
    c.run(q().accept,
          {text(task.id), text(task.idempotency_key), text(task.dependency), text(task.method), text(task.target),
           bytes(encode_headers(task.headers)), bytes(task.body), text(task.policy_id), number(task.attempts),
           number(to_ms(task.next_attempt_at)), number(to_ms(task.created_at)), text(to_string(task.status))});
    if (c.failed) return failure<bool>(done, c.error);
    c.notify = true;
    return answer<bool>(done, std::nullopt, true);
  });
}

void postgres_store::submit_claim(std::string owner, wall_clock::time_point now, wall_clock::time_point lease_until,
                                  std::size_t limit, callback<std::vector<retry_task>> done) {
  enqueue<std::vector<retry_task>>(
      std::move(done), [this, owner = std::move(owner), now, lease_until, limit](
                           pg_connection& c, const callback<std::vector<retry_task>>& done) {
        // Claims come every poll: what keeps the size (and /readyz) current while nothing new
        // arrives, as deliveries and retention make room.
        measure(c);
        if (c.failed) return failure<std::vector<retry_task>>(done, c.error);
        // SKIP LOCKED: rows another instance is claiming right now are passed over, not waited
        // for, so a fleet's claims never queue behind each other.
        std::vector<retry_task> out;
        for (auto const* sql : {&q().claim_expired, &q().claim_due}) {
          if (out.size() >= limit) break;
          auto r = c.run(*sql, {text(owner), number(to_ms(lease_until)), number(to_ms(now)),
                                number(static_cast<std::int64_t>(limit - out.size()))});
          if (c.failed) return failure<std::vector<retry_task>>(done, c.error);
          for (int i = 0; i < r.rows(); ++i) out.push_back(read_task(r, i));
        }
        for (auto& t : out) t.status = task_status::in_flight;
        return answer<std::vector<retry_task>>(done, std::nullopt, std::move(out));
      });
}

void postgres_store::submit_finish_attempt(std::string owner, attempt_log attempt, task_status next,
                                           wall_clock::time_point next_attempt_at, callback<bool> done) {
  enqueue<bool>(std::move(done), [owner = std::move(owner), attempt = std::move(attempt), next, next_attempt_at](
                                     pg_connection& c, const callback<bool>& done) {
    auto u = c.run(q().finish_attempt, {text(to_string(next)), number(attempt.number), number(to_ms(next_attempt_at)),
                                        text(attempt.task_id), text(owner)});
    if (c.failed) return failure<bool>(done, c.error);
    if (u.changes() == 0) return answer<bool>(done, std::nullopt, false);  // the lease was lost
    c.run(q().log_attempt, {text(attempt.task_id), number(attempt.number), number(to_ms(attempt.at)),
                            number(attempt.status), text(attempt.error_type), number(attempt.duration.count())});
    if (c.failed) return failure<bool>(done, c.error);
    return answer<bool>(done, std::nullopt, true);
  });
}

void postgres_store::submit_postpone(std::string owner, std::string id, wall_clock::time_point until,
                                     callback<bool> done) {
  enqueue<bool>(std::move(done),
                [owner = std::move(owner), id = std::move(id), until](pg_connection& c, const callback<bool>& done) {
                  auto u = c.run(q().postpone, {number(to_ms(until)), text(id), text(owner)});
                  if (c.failed) return failure<bool>(done, c.error);
                  return answer<bool>(done, std::nullopt, u.changes() > 0);
                });
}

void postgres_store::submit_renew_lease(std::string owner, std::string id, wall_clock::time_point lease_until,
                                        callback<bool> done) {
  enqueue<bool>(std::move(done), [owner = std::move(owner), id = std::move(id), lease_until](
                                     pg_connection& c, const callback<bool>& done) {
    auto u = c.run(q().renew_lease, {number(to_ms(lease_until)), text(id), text(owner)});
    if (c.failed) return failure<bool>(done, c.error);
    return answer<bool>(done, std::nullopt, u.changes() > 0);
  });
}

void postgres_store::submit_get(std::string id, callback<std::optional<retry_task>> done) {
  enqueue<std::optional<retry_task>>(
      std::move(done), [id = std::move(id)](pg_connection& c, const callback<std::optional<retry_task>>& done) {
        auto r = c.run(q().get_task, {text(id)});
        if (c.failed) return failure<std::optional<retry_task>>(done, c.error);
        if (r.rows() == 0) return answer<std::optional<retry_task>>(done, std::nullopt, std::nullopt);
        return answer<std::optional<retry_task>>(done, std::nullopt, read_task(r, 0));
      });
}

void postgres_store::submit_attempts(std::string id, unsigned after, std::size_t limit,
                                     callback<std::vector<attempt_log>> done) {
  enqueue<std::vector<attempt_log>>(
      std::move(done),
      [id = std::move(id), after, limit](pg_connection& c, const callback<std::vector<attempt_log>>& done) {
        auto r = c.run(q().attempts, {text(id), number(after), number(static_cast<std::int64_t>(limit))});
        if (c.failed) return failure<std::vector<attempt_log>>(done, c.error);
        std::vector<attempt_log> out;
        for (int i = 0; i < r.rows(); ++i)
          out.push_back(attempt_log{id, static_cast<unsigned>(r.integer(i, 0)), from_ms(r.integer(i, 1)),
                                    static_cast<unsigned>(r.integer(i, 2)), r.text(i, 3),
                                    std::chrono::microseconds(r.integer(i, 4))});
        return answer<std::vector<attempt_log>>(done, std::nullopt, std::move(out));
      });
}

void postgres_store::submit_list(task_filter filter, callback<std::vector<retry_task>> done) {
  enqueue<std::vector<retry_task>>(
      std::move(done), [filter = std::move(filter)](pg_connection& c, const callback<std::vector<retry_task>>& done) {
        auto r = c.run(q().list, filter_params(filter, filter.status));
        if (c.failed) return failure<std::vector<retry_task>>(done, c.error);
        return answer<std::vector<retry_task>>(done, std::nullopt, read_tasks(r));
      });
}

void postgres_store::submit_replay(std::string id, wall_clock::time_point now, callback<bool> done) {
  enqueue<bool>(std::move(done), [id = std::move(id), now](pg_connection& c, const callback<bool>& done) {
    auto u = c.run(q().replay, {text(id), number(to_ms(now))});
    if (c.failed) return failure<bool>(done, c.error);
    c.notify = c.notify || u.changes() > 0;  // never undoes an accept's in the same commit
    return answer<bool>(done, std::nullopt, u.changes() > 0);
  });
}

void postgres_store::submit_replay_matching(task_filter filter, wall_clock::time_point now,
                                            callback<std::vector<std::string>> done) {
  enqueue<std::vector<std::string>>(
      std::move(done),
      [filter = std::move(filter), now](pg_connection& c, const callback<std::vector<std::string>>& done) {
        auto params = filter_params(filter, task_status::dead_lettered);
        params.push_back(number(to_ms(now)));
        auto r = c.run(q().replay_matching, params);
        if (c.failed) return failure<std::vector<std::string>>(done, c.error);
        std::vector<std::string> ids;
        for (int i = 0; i < r.rows(); ++i) ids.push_back(r.text(i, 0));
        std::sort(ids.begin(), ids.end());  // RETURNING keeps no order; the cursor is the last id
        c.notify = c.notify || !ids.empty();
        return answer<std::vector<std::string>>(done, std::nullopt, std::move(ids));
      });
}

void postgres_store::submit_cancel(std::string id, wall_clock::time_point now, callback<bool> done) {
  enqueue<bool>(std::move(done), [id = std::move(id), now](pg_connection& c, const callback<bool>& done) {
    // next_attempt_at becomes when it ended, as for every finished task (submit_purge).
    auto u = c.run(q().cancel, {text(id), number(to_ms(now))});
    if (c.failed) return failure<bool>(done, c.error);
    return answer<bool>(done, std::nullopt, u.changes() > 0);
  });
}

void postgres_store::submit_delete_dead_letter(std::string id, callback<bool> done) {
  enqueue<bool>(std::move(done), [id = std::move(id)](pg_connection& c, const callback<bool>& done) {
    auto u = c.run(q().delete_dead_letter, {text(id)});
    if (c.failed) return failure<bool>(done, c.error);
    return answer<bool>(done, std::nullopt, u.changes() > 0);
  });
}

void postgres_store::submit_counts(callback<status_counts> done) {
  enqueue<status_counts>(std::move(done), [](pg_connection& c, const callback<status_counts>& done) {
    // Counted by the database on each call: a fleet moves tasks that this process never sees.
    auto r = c.run(q().count_by_status, {});
    if (c.failed) return failure<status_counts>(done, c.error);
    status_counts counts{};
    for (int i = 0; i < r.rows(); ++i)
      if (auto st = parse_task_status(r.text(i, 0)))
        counts[static_cast<std::size_t>(*st)] = static_cast<std::uint64_t>(r.integer(i, 1));
    return answer<status_counts>(done, std::nullopt, counts);
  });
}

void postgres_store::submit_backlog(wall_clock::time_point before, callback<backlog> done) {
  enqueue<backlog>(std::move(done), [before](pg_connection& c, const callback<backlog>& done) {
    auto r = c.run(q().backlog, {number(to_ms(before))});
    if (c.failed) return failure<backlog>(done, c.error);
    backlog b{static_cast<std::uint64_t>(r.integer(0, 0)), std::nullopt};
    if (auto const oldest = r.integer(0, 1); oldest > 0) b.oldest = from_ms(oldest);
    return answer<backlog>(done, std::nullopt, b);
  });
}

void postgres_store::submit_purge(wall_clock::time_point ended_before, std::size_t limit,
                                  callback<std::uint64_t> done) {
  enqueue<std::uint64_t>(std::move(done), [ended_before, limit](pg_connection& c, const callback<std::uint64_t>& done) {
    // SKIP LOCKED: every instance of a fleet purges; they split the rows instead of waiting.
    // Attempts go with their task (ON DELETE CASCADE). A status at a time, each walking the
    // ended-task index in order.
    std::uint64_t purged = 0;
    for (auto st : {task_status::succeeded, task_status::cancelled, task_status::exhausted}) {
      if (purged >= limit) break;
      auto u = c.run(q().purge_tasks, {text(to_string(st)), number(to_ms(ended_before)),
                                       number(static_cast<std::int64_t>(limit - purged))});
      if (c.failed) return failure<std::uint64_t>(done, c.error);
      purged += u.changes();
    }
    return answer<std::uint64_t>(done, std::nullopt, purged);
  });
}

void postgres_store::submit_put_policy(stored_policy p, callback<policy_put> done) {
  enqueue<policy_put>(std::move(done), [p = std::move(p)](pg_connection& c, const callback<policy_put>& done) {
    auto u = c.run(q().put_policy, {text(p.id), text(p.spec), number(to_ms(p.created_at))});
    if (c.failed) return failure<policy_put>(done, c.error);
    if (u.changes() > 0) return answer<policy_put>(done, std::nullopt, policy_put::created);
    auto r = c.run(q().policy_spec, {text(p.id)});
    if (c.failed || r.rows() == 0) return failure<policy_put>(done, c.failed ? c.error : "the policy vanished");
    return answer<policy_put>(done, std::nullopt,
                              r.text(0, 0) == p.spec ? policy_put::unchanged : policy_put::conflict);
  });
}

void postgres_store::submit_get_policy(std::string id, callback<std::optional<stored_policy>> done) {
  enqueue<std::optional<stored_policy>>(
      std::move(done), [id = std::move(id)](pg_connection& c, const callback<std::optional<stored_policy>>& done) {
        auto r = c.run(q().get_policy, {text(id)});
        if (c.failed) return failure<std::optional<stored_policy>>(done, c.error);
        if (r.rows() == 0) return answer<std::optional<stored_policy>>(done, std::nullopt, std::nullopt);
        return answer<std::optional<stored_policy>>(done, std::nullopt,
                                                    stored_policy{id, r.text(0, 0), from_ms(r.integer(0, 1))});
      });
}

void postgres_store::submit_claim_key(std::string scope_key, std::string fingerprint, wall_clock::time_point now,
                                      wall_clock::time_point lease_until, callback<key_claim> done) {
  enqueue<key_claim>(std::move(done), [this, scope_key = std::move(scope_key), fingerprint = std::move(fingerprint),
                                       now, lease_until](pg_connection& c, const callback<key_claim>& done) {
    // Only a key that is new needs room; one held or answered is found whatever the size.
    // So the full check comes first only when the key is unknown (the insert below).
    if (guard_.full()) {
      auto r = c.run(q().key_known, {text(scope_key)});
      if (c.failed) return failure<key_claim>(done, c.error);
      if (r.rows() == 0) {
        if (auto refused = refuse_new(c)) return answer<key_claim>(done, std::move(refused), key_claim{});
      }
    }
    // Never seen: the insert takes it. Two instances inserting at once: the second waits for
    // the first's commit and inserts nothing, then reads what the first holds.
    auto ins = c.run(q().insert_key, {text(scope_key), text(fingerprint), number(to_ms(lease_until))});
    if (c.failed) return failure<key_claim>(done, c.error);
    if (ins.changes() > 0) return answer<key_claim>(done, std::nullopt, key_claim{});
    auto r = c.run(q().find_key, {text(scope_key)});
    if (c.failed) return failure<key_claim>(done, c.error);
    if (r.rows() > 0) {
      bool const pending = r.text(0, 1) == "pending";
      // An expired answer, or a holder whose lease ran out (it crashed): the key is free again.
      bool const free = pending ? r.integer(0, 2) <= to_ms(now) : r.integer(0, 3) <= to_ms(now);
      if (!free) {
        if (r.text(0, 0) != fingerprint)
          return answer<key_claim>(done, std::nullopt, key_claim{key_state::mismatch, {}});
        if (pending) return answer<key_claim>(done, std::nullopt, key_claim{key_state::in_flight, {}});
        return answer<key_claim>(
            done, std::nullopt,
            key_claim{key_state::replay, pinned_response{static_cast<unsigned>(r.integer(0, 4)),
                                                         decode_headers(r.text(0, 5)), r.text(0, 6)}});
      }
    }
    c.run(q().reclaim_key, {text(scope_key), text(fingerprint), number(to_ms(lease_until))});
    if (c.failed) return failure<key_claim>(done, c.error);
    return answer<key_claim>(done, std::nullopt, key_claim{});
  });
}

void postgres_store::submit_complete_key(std::string scope_key, pinned_response r, wall_clock::time_point expires_at,
                                         callback<bool> done) {
  enqueue<bool>(std::move(done), [scope_key = std::move(scope_key), r = std::move(r), expires_at](
                                     pg_connection& c, const callback<bool>& done) {
    auto u = c.run(q().complete_key, {text(scope_key), number(to_ms(expires_at)), number(r.status),
                                      bytes(encode_headers(r.headers)), bytes(r.body)});
    if (c.failed) return failure<bool>(done, c.error);
    return answer<bool>(done, std::nullopt, u.changes() > 0);
  });
}

void postgres_store::submit_release_key(std::string scope_key, callback<bool> done) {
  enqueue<bool>(std::move(done), [scope_key = std::move(scope_key)](pg_connection& c, const callback<bool>& done) {
    auto u = c.run(q().release_key, {text(scope_key)});
    if (c.failed) return failure<bool>(done, c.error);
    return answer<bool>(done, std::nullopt, u.changes() > 0);
  });
}

void postgres_store::submit_purge_keys(wall_clock::time_point now, std::size_t limit, callback<std::uint64_t> done) {
  enqueue<std::uint64_t>(std::move(done), [now, limit](pg_connection& c, const callback<std::uint64_t>& done) {
    auto u = c.run(q().purge_keys, {number(to_ms(now)), number(static_cast<std::int64_t>(limit))});
    if (c.failed) return failure<std::uint64_t>(done, c.error);
    return answer<std::uint64_t>(done, std::nullopt, u.changes());
  });
}

}  // namespace rebound::store
