// breakers.js: the dashboard's breakers page (registerPage, app.js): the
// circuit breakers the worker processes sharing the store keep for their
// dependencies, who opened each and when, and buttons to force one open or
// close it for the whole fleet, or delete one nothing uses.
'use strict';

// breakerState is a breaker's state badge, with "forced" when an operator
// holds it open.
function breakerState(b) {
  const s = h('span', {}, badge(b.state.replace('_', '-'), b.state));
  if (b.forced) s.append(' ', badge('forced', 'dead'));
  return s;
}

// breakerProbe words when an open breaker lets a probe through, or who
// holds the probe of a half-open one.
function breakerProbe(b) {
  if (b.state === 'half_open' && b.probe_by) {
    return h('span', { title: `lease until ${fmtTime(b.probe_until)}` }, `probing: ${b.probe_by}`);
  }
  if (b.state === 'half_open') return 'next call';
  if (b.state !== 'open') return '—';
  if (!b.ready_at) return h('span', { class: 'muted' }, 'when closed');
  return h('span', { title: fmtTime(b.ready_at) }, fmtAgo(b.ready_at));
}

// breakerAction forces a breaker open (for the duration chosen in its row)
// or closes it, after the operator confirms.
async function breakerAction(b, verb, duration) {
  let text;
  if (verb === 'open') {
    text = duration
      ? `Every worker on the store stops calling ${b.name} and defers its jobs for ${duration}; then one probe goes through.`
      : `Every worker on the store stops calling ${b.name} and defers its jobs until the breaker is closed here.`;
  } else {
    text = `Every worker on the store calls ${b.name} again; the fleet's counts are cleared. Jobs already deferred run when their deferral ends.`;
  }
  const label = verb === 'open' ? 'Force open' : 'Close';
  const ok = await confirmDialog(`${label}: ${b.name}?`, text, label, verb === 'open' ? 'danger' : 'primary');
  if (!ok) return;
  try {
    const path = `/v1/breakers/${encodeURIComponent(b.name)}/${verb === 'open' ? 'open' : 'reset'}`;
    await api.post(path, verb === 'open' && duration ? { duration } : undefined);
    statusEl.textContent = `Breaker ${b.name}: ${verb === 'open' ? 'forced open' : 'closed'}.`;
  } catch (e) {
    await messageDialog('Failed', e.message);
  }
  render();
}

// breakerDeletable reports whether a row offers Delete: a shared breaker
// closed (the server refuses one reported on recently, saying why) or
// forced open by an operator.
function breakerDeletable(b) {
  return b.shared && (b.state === 'closed' || b.forced);
}

// breakerDelete deletes a breaker's shared record, after the operator
// confirms; a refusal (in use) is shown as the server words it.
async function breakerDelete(b) {
  const text = (b.forced
    ? `Every worker on the store calls ${b.name} again, and the breaker leaves this page and the metrics.`
    : `The breaker leaves this page and the metrics.`) +
    ' A worker that calls the dependency again creates it anew, closed.';
  if (!await confirmDialog(`Delete: ${b.name}?`, text, 'Delete', 'danger')) return;
  try {
    await api.del(`/v1/breakers/${encodeURIComponent(b.name)}`);
    statusEl.textContent = `Breaker ${b.name}: deleted.`;
  } catch (e) {
    await messageDialog('Not deleted', e.message);
  }
  render();
}

// breakerFailures is the failures cell: the count within the window of
// a closed breaker; an open one counts none (its count restarts when it
// trips), which 0 would misstate.
function breakerFailures(b) {
  if (b.state === 'open' || b.state === 'half_open') {
    return h('td', { class: 'num failures muted', title: 'the count restarts when the breaker trips; it counts again once closed' },
      'not counted while open');
  }
  return h('td', { class: 'num failures' }, fmtN(b.failures));
}

async function breakersPage() {
  const list = (await api.get('/v1/breakers')) || [];
  const fallback = list.some((b) => b.fallback);
  const rows = list.map((b) => {
    const dur = h('select', { class: 'small', 'data-duration': '', title: 'how long to force it open' },
      h('option', { value: '15m' }, '15 min'), h('option', { value: '1h' }, '1 hour'), h('option', { value: '' }, 'until closed'));
    return h('tr', { 'data-breaker': b.name, 'data-state': b.state },
      h('td', {}, b.name, b.shared ? '' : h('span', { class: 'muted', title: 'only this process has used it: no failure reported to the store yet' }, ' (this process)')),
      h('td', { class: 'state' }, breakerState(b)),
      breakerFailures(b),
      h('td', { class: 'num' }, fmtN(b.trips)),
      h('td', { class: 'opened-by' }, b.opened_by || '—'),
      h('td', { class: 'opened-at', title: b.opened_at ? fmtTime(b.opened_at) : '' }, b.opened_at ? fmtAgo(b.opened_at) : '—'),
      h('td', { class: 'probe' }, breakerProbe(b)),
      h('td', { class: 'row-actions' }, h('div', { class: 'actions' },
        b.state === 'closed'
          ? [dur, h('button', { class: 'small', 'data-needs': 'operate', 'data-action': 'open', onclick: () => breakerAction(b, 'open', dur.value) }, 'Force open')]
          : h('button', { class: 'small', 'data-needs': 'operate', 'data-action': 'close', onclick: () => breakerAction(b, 'close') }, 'Close'),
        breakerDeletable(b) ? h('button', { class: 'small danger', 'data-needs': 'operate', 'data-action': 'delete', onclick: () => breakerDelete(b) }, 'Delete') : '')));
  });
  return h('div', {},
    h('h1', {}, 'Circuit breakers'),
    fallback ? h('div', { class: 'card warn', 'data-fallback': 'true' },
      'This server\'s process lost the store: its breakers decide alone, on its own calls, until the store is back.') : '',
    h('div', { class: 'card' },
      list.length === 0
        ? h('p', { class: 'empty' }, 'No circuit breaker has been used yet.')
        : [h('p', { class: 'muted' }, 'Shared by every worker process on the store: when one process\'s failures trip a breaker, all stop calling the dependency, and one probe (fleet-wide) tests it when the break ends.'),
          h('table', { class: 'breakers' },
            h('thead', {}, h('tr', {}, h('th', {}, 'Dependency'), h('th', {}, 'State'), h('th', { class: 'num' }, 'Failures'),
              h('th', { class: 'num' }, 'Trips'), h('th', {}, 'Opened by'), h('th', {}, 'Opened'), h('th', {}, 'Probe'), h('th', {}, ''))),
            h('tbody', {}, rows))]));
}

registerPage('breakers', { page: () => breakersPage(), refresh: 2 });
