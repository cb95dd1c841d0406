// limits.js: the dashboard's limits page (registerPage, app.js): each
// fleet-wide limit, what it applies to, its use now (running jobs, the
// busiest groups, the jobs waiting), a chart of its use over the last hour
// (sampled once a minute with the statistics snapshots: GET
// /v1/stats/series), and a button to change its max for the whole fleet.
'use strict';

// LIMIT_GROUPS is how many of a limit's busiest groups the page shows.
const LIMIT_GROUPS = 10;

// LIMIT_KNOWN are the fields of a limit the page shows in its own words;
// any other field the API gives (a rate limit's rate, interval, burst…)
// is listed as it comes.
const LIMIT_KNOWN = new Set(['name', 'max', 'in_use', 'busiest', 'groups', 'waiting', 'updated_at',
  'configured', 'queue', 'kind', 'key', 'busiest_groups', 'hold_on_retry_after', 'held_groups', 'holds']);

// limitHold says whether a limit holds a group on a 429 with Retry-After,
// and which groups it holds now, until when.
function limitHold(l) {
  const held = l.held_groups || 0;
  const state = l.hold_on_retry_after ? 'on' : 'off';
  if (held === 0) return state;
  const holds = (l.holds || []).map((x, i) => [i ? ', ' : '',
    h('span', { class: 'mono', 'data-held': x.key }, x.key === '' ? '(all)' : x.key), ' until ',
    h('span', { title: fmtTime(x.until) }, fmtTime(x.until))]);
  const more = held - (l.holds || []).length;
  return [`${state}: ${fmtN(held)} group${held === 1 ? '' : 's'} held: `, holds, more > 0 ? ` and ${fmtN(more)} more` : ''];
}

// limitSelector says which jobs a limit applies to and what makes their
// group, as the server is configured.
function limitSelector(l) {
  if (!l.configured) {
    return h('span', { class: 'muted', title: 'This server is not configured with this limit: another process puts jobs under it, or it was set with PUT /v1/limits' }, 'not configured on this server');
  }
  const what = [];
  if (l.queue) what.push(['queue ', h('span', { class: 'mono' }, l.queue)]);
  if (l.kind) what.push(['kind ', h('span', { class: 'mono' }, l.kind)]);
  const jobs = what.length === 0 ? 'every job' : ['jobs of ', what.map((w, i) => [i ? ' and ' : '', w])];
  const group = l.key
    ? [', one group per ', h('span', { class: 'mono' }, l.key)]
    : ', all in one group';
  return h('span', {}, jobs, group);
}

// fmtField shows a field of a limit the page has no words for.
function fmtField(v) {
  if (v === null || v === undefined) return '—';
  if (typeof v === 'object') return h('span', { class: 'mono' }, JSON.stringify(v));
  return String(v);
}

// limitGroups is the table of a limit's busiest groups: each one's
// running jobs against the max.
function limitGroups(l) {
  const list = l.busiest_groups || [];
  if (list.length === 0) return h('p', { class: 'muted', 'data-groups': '0' }, 'No job of this limit runs now.');
  const more = (l.groups || 0) - list.length;
  return h('div', {},
    h('table', { class: 'limit-groups' },
      h('thead', {}, h('tr', {}, h('th', {}, l.key ? 'Group' : 'Group (one for the limit)'), h('th', { class: 'num' }, 'Running'), h('th', {}, ''))),
      h('tbody', {}, list.map((g) => h('tr', { 'data-group': g.key, 'data-running': g.running },
        h('td', { class: 'mono clip', title: g.key }, g.key === '' ? h('span', { class: 'muted' }, '(all)') : g.key),
        h('td', { class: 'num' }, `${fmtN(g.running)} of ${fmtN(l.max)}`),
        h('td', {}, h('progress', { max: Math.max(l.max, 1), value: Math.min(g.running, l.max), title: g.running >= l.max ? 'full: its next jobs wait' : '' })))))),
    more > 0 && h('p', { class: 'muted', 'data-more-groups': more }, `and ${fmtN(more)} more group${more === 1 ? '' : 's'} with running jobs`));
}

// limitChart charts a limit's running jobs, sampled at the start of each
// minute of the last hour.
function limitChart(l, series) {
  const slots = minutes(series).map((sl) => {
    const u = sl.p && sl.p.limits && sl.p.limits[l.name];
    return { t: sl.t, v: [u ? u.in_use : 0], partial: sl.p && sl.p.partial };
  });
  const chart = barChart(slots, [{ key: 'in_use', label: 'running', color: 'var(--info)' }]);
  // A use is a level, not a count: the legend gives the peak, not a sum.
  const peak = Math.max(0, ...slots.map((sl) => sl.v[0]));
  const legend = chart.querySelector('[data-total="in_use"]');
  if (legend) legend.textContent = `running, sampled at each minute's start: peak ${fmtN(peak)}`;
  return chart;
}

// setLimitDialog changes a limit's max for the whole fleet, after the
// operator confirms it.
function setLimitDialog(l) {
  const input = h('input', { type: 'number', min: '1', max: '1000000', step: '1', value: l.max, id: 'limit-max', 'aria-label': 'new max' });
  const err = h('p', { class: 'error', role: 'alert' });
  openDialog(
    h('h2', {}, `Change the max of ${l.name}?`),
    h('p', {}, 'Every process on the store applies it at its next fetch: a higher max starts waiting jobs at once; ',
      'a lower one stops new starts until enough running jobs end. No running job is stopped.'),
    h('form', { class: 'filters', onsubmit: (ev) => ev.preventDefault() },
      h('label', {}, l.key ? 'Jobs of one group at once' : 'Jobs at once', input)),
    err,
    h('div', { class: 'actions' },
      h('button', { onclick: closeDialog }, 'Back'),
      h('button', { class: 'primary', id: 'confirm', onclick: async () => {
        const max = Number(input.value);
        if (!Number.isInteger(max) || max < 1 || max > 1000000) {
          err.textContent = 'The max is a whole number from 1 to 1,000,000.';
          return;
        }
        try {
          await api.put(`/v1/limits/${encodeURIComponent(l.name)}`, { max });
        } catch (e) {
          err.textContent = e.message;
          return;
        }
        closeDialog();
        statusEl.textContent = `Limit ${l.name}: max ${fmtN(max)}.`;
        render();
      } }, 'Change max')));
  input.focus();
}

function limitCard(l, series) {
  const kv = (k, v, attrs) => [h('dt', {}, k), h('dd', attrs || {}, v)];
  const extra = Object.keys(l).filter((k) => !LIMIT_KNOWN.has(k)).sort();
  const full = l.busiest >= l.max && l.in_use > 0;
  return h('section', { class: 'card', 'data-limit': l.name },
    h('h2', {}, h('span', { class: 'mono' }, l.name), ' ', full && h('span', { title: 'a group is full: its next jobs wait' }, badge('full', 'running'))),
    h('div', { class: 'row' },
      h('div', { class: 'limit-facts' },
        h('dl', { class: 'kv' },
          kv('Applies to', limitSelector(l), { 'data-selector': '' }),
          kv('Max', [h('span', { 'data-max': l.max }, `${fmtN(l.max)} ${l.key ? 'per group' : 'at once'}`), ' ',
            h('button', { class: 'small', 'data-needs': 'operate', 'data-action': 'set-max', onclick: () => setLimitDialog(l) }, 'Change')]),
          kv('Running', l.in_use === 0 ? 'none'
            : `${fmtN(l.in_use)} in ${fmtN(l.groups)} group${l.groups === 1 ? '' : 's'}, at most ${fmtN(l.busiest)} in one`,
          { 'data-in-use': l.in_use }),
          kv('Waiting', fmtN(l.waiting), { 'data-waiting': l.waiting, title: 'Due jobs not running: waiting on a full group or its rate, or not fetched yet. A job waiting on a limit uses no attempt.' }),
          kv('Hold on Retry-After', limitHold(l), { 'data-hold': l.hold_on_retry_after ? 'on' : 'off', 'data-held-groups': l.held_groups || 0,
            title: 'On: a 429 (or 503) with Retry-After of one of its jobs holds the job\'s group, fleet-wide, until then (redrive limits set NAME --hold on|off).' }),
          extra.map((k) => kv(k.replace(/_/g, ' '), fmtField(l[k]), { 'data-field': k })),
          l.updated_at && !l.updated_at.startsWith('0001-') && kv('Max set', h('span', { title: fmtTime(l.updated_at) }, fmtAgo(l.updated_at)))),
        h('h3', {}, 'Busiest groups'),
        limitGroups(l)),
      h('div', { class: 'chart limit-chart' }, h('h3', {}, 'Running, last hour'), limitChart(l, series))));
}

async function limitsPage() {
  const [res, series] = await Promise.all([
    api.get(`/v1/limits?groups=${LIMIT_GROUPS}`),
    api.get('/v1/stats/series?since=1h'),
  ]);
  const list = (res && res.limits) || [];
  return h('div', {},
    h('h1', {}, 'Limits'),
    list.length === 0
      ? h('div', { class: 'card' }, h('p', { class: 'empty' },
        'No concurrency limit. Configure them with serve\'s concurrency-limits setting (see docs/api.md).'))
      : [h('p', { class: 'muted' }, 'Fleet-wide: every process on the store shares each limit. A job whose group is full waits, due, without using an attempt, and starts as soon as a job of its group ends.'),
        list.map((l) => limitCard(l, series))]);
}

registerPage('limits', { page: () => limitsPage(), refresh: 5 });
