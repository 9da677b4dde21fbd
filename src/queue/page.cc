#include "queue/page.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "common/metrics.h"
#include "queue/keys.h"

namespace etcdq::queue {
namespace {

// The page: plain DOM, no outside scripts or styles (it must work offline
// and under a strict proxy). Cells have ids "{field}-{row}" and rows a
// data-queue attribute, so a test (tests/integration/test_queue_page.py)
// reads what a person sees.
constexpr std::string_view kHtml = R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>etcdq queues</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}th,td{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}#status{color:#666;margin:.5em 0}
#login{display:none;margin:1em 0}.err{color:#b00}
</style></head><body>
<h1>Queues</h1>
<div id="status">loading…</div>
<form id="login"><span>Auth is on: sign in as an etcd user who may read the queues.</span><br>
<input id="user" placeholder="user" autocomplete="username">
<input id="password" type="password" placeholder="password" autocomplete="current-password">
<button>Sign in</button> <span id="login-error" class="err"></span></form>
<table id="queues"><thead><tr><th>queue</th><th>depth</th><th>in flight</th><th>produced/s</th><th>acked/s</th>
<th>oldest age (s)</th><th>consumers here</th><th>dead letters</th><th>produced</th><th>acked</th></tr></thead>
<tbody></tbody></table>
<script>
"use strict";
const prev = new Map();
let polls = 0;
function token() { return sessionStorage.getItem("etcdq-token") || ""; }
function rate(now, before, field) {
  if (!before || now.time_ms <= before.time_ms) return "–";
  return ((now.q[field] - before.q[field]) * 1000 / (now.time_ms - before.time_ms)).toFixed(1);
}
function cell(tr, id, text) {
  const td = document.createElement("td");
  td.id = id; td.textContent = String(text); tr.appendChild(td);
}
function show(data) {
  const body = document.querySelector("#queues tbody");
  body.textContent = "";
  data.queues.forEach((q, i) => {
    const tr = document.createElement("tr");
    tr.dataset.queue = q.name;
    const before = prev.get(q.name);
    const now = {time_ms: data.time_ms, q: q};
    cell(tr, "name-" + i, q.name);
    cell(tr, "depth-" + i, q.depth);
    cell(tr, "in_flight-" + i, q.in_flight);
    cell(tr, "produce_rate-" + i, rate(now, before, "produced"));
    cell(tr, "ack_rate-" + i, rate(now, before, "acked"));
    cell(tr, "oldest_age-" + i, q.oldest_age_seconds.toFixed(1));
    cell(tr, "consumers-" + i, q.consumers);
    cell(tr, "dead_letters-" + i, q.dead_letter_depth);
    cell(tr, "produced-" + i, q.produced);
    cell(tr, "acked-" + i, q.acked);
    body.appendChild(tr);
    prev.set(q.name, now);
  });
  polls++;
  document.body.dataset.polls = String(polls);
  document.getElementById("status").textContent = "member " + data.member + ", " + data.queues.length +
      " queues" + (data.truncated ? " (first ones only)" : "") + ", updated " + new Date(data.time_ms).toISOString();
}
async function poll() {
  try {
    const headers = token() ? {Authorization: token()} : {};
    const r = await fetch("queues.json", {headers: headers, cache: "no-store"});
    const data = await r.json();
    if (r.status === 401) {
      sessionStorage.removeItem("etcdq-token");
      document.getElementById("login").style.display = "block";
      document.getElementById("status").textContent = data.error || "unauthorized";
    } else {
      document.getElementById("login").style.display = "none";
      show(data);
    }
  } catch (e) {
    document.getElementById("status").textContent = "cannot reach the member: " + e;
  }
  setTimeout(poll, 1000);
}
document.getElementById("login").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const err = document.getElementById("login-error");
  try {
    const r = await fetch("v3/auth/authenticate", {method: "POST", body: JSON.stringify({
        name: document.getElementById("user").value, password: document.getElementById("password").value})});
    const data = await r.json();
    if (!r.ok || !data.token) { err.textContent = data.message || data.error || ("HTTP " + r.status); return; }
    sessionStorage.setItem("etcdq-token", data.token);
    err.textContent = "";
  } catch (e) { err.textContent = String(e); }
});
poll();
</script></body></html>
)HTML";

// `only`: one queue's entry (GET /queues.json/NAME), nullptr: every queue's.
std::string page_json(const PageInputs& in, int64_t now_ms, const keyspace::MayRead& may_read,
                      const std::string* only) {
  nlohmann::json queues = nlohmann::json::array();
  bool truncated = false;
  std::vector<std::string> names = only != nullptr ? std::vector<std::string>{*only} : in.book->queues();
  for (const auto& name : names) {
    // The queue's whole prefix: its messages, config and consumer keys.
    std::string prefix = queue_prefix(name);
    std::string end = prefix;
    end.back() = '/' + 1;
    if (!may_read(prefix, end)) continue;
    if (queues.size() == kMaxQueues) {
      truncated = true;
      break;
    }
    QueueView v;
    if (!in.book->view(name, &v)) continue;  // emptied meanwhile
    int64_t oldest = in.book->oldest_produced_ms(name);
    std::string dlq = dead_letter_queue(name);
    QueueView dv;
    uint64_t dlq_depth = in.book->view(dlq, &dv) ? dv.counters.depth() : 0;
    auto consumers = in.consumers.find(name);
    const auto& c = v.counters;
    queues.push_back({
        {"name", metrics::label_value(name)},
        {"depth", c.depth()},
        {"in_flight", in_flight(v, now_ms, in.alive)},
        {"produced", c.produced()},
        {"delivered", c.delivered()},
        {"redelivered", c.redelivered()},
        {"acked", c.acked()},
        {"dead_lettered", c.dead_lettered()},
        {"oldest_age_seconds", oldest > 0 && now_ms > oldest ? (now_ms - oldest) / 1000.0 : 0.0},
        {"consumers", consumers == in.consumers.end() ? 0 : consumers->second},
        {"dead_letter_queue", metrics::label_value(dlq)},
        {"dead_letter_depth", dlq_depth},
    });
  }
  nlohmann::json j = {{"member", fmt::format("{:x}", in.self)},
                      {"time_ms", now_ms},
                      {"queues", std::move(queues)},
                      {"truncated", truncated}};
  // label_value made every name valid UTF-8; replace guards the rest.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

bool serve_page(const PageInputs& in, std::string_view path, int64_t now_ms, const keyspace::MayRead& may_read,
                keyspace::Page* out) {
  if (path == "/queues") {
    out->content_type = "text/html; charset=utf-8";
    out->body = kHtml;
    return true;
  }
  if (path == "/queues.json") {
    out->content_type = "application/json";
    out->body = page_json(in, now_ms, may_read, nullptr);
    out->needs_user = true;
    return true;
  }
  // One queue (`etcdq queue stat`): the same answer, with at most its
  // entry, whatever its place among the queues (kMaxQueues).
  constexpr std::string_view kOne = "/queues.json/";
  if (path.starts_with(kOne) && path.size() > kOne.size() &&
      path.find('/', kOne.size()) == std::string_view::npos) {
    std::string name(path.substr(kOne.size()));
    out->content_type = "application/json";
    out->body = page_json(in, now_ms, may_read, &name);
    out->needs_user = true;
    return true;
  }
  return false;
}

}  // namespace etcdq::queue
