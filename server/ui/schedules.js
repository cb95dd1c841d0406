// schedules.js: the dashboard's schedules page (registerPage, app.js):
// every periodic schedule with its next and last runs, and buttons to
// pause, resume and run one now.
'use strict';

// scheduleSpec words when a schedule runs.
function scheduleSpec(s) {
  if (s.error) return h('span', { class: 'muted', title: s.error }, 'unreadable');
  if (s.cron) return [h('span', { class: 'mono' }, s.cron), s.time_zone ? h('span', { class: 'muted' }, ` ${s.time_zone}`) : h('span', { class: 'muted' }, ' UTC')];
  return h('span', { class: 'mono' }, `every ${s.every}`);
}

// scheduleAction pauses, resumes or triggers a schedule, after the
// operator confirms.
async function scheduleAction(s, verb) {
  const texts = {
    pause: ['Pause', 'Nothing is enqueued for it until it is resumed; its occurrences meanwhile never run. Jobs already enqueued are not touched.', 'danger'],
    resume: ['Resume', 'It goes on from now: its next occurrence is the next enqueued.', 'primary'],
    trigger: ['Run now', `One ${s.kind} job is enqueued now on queue ${s.queue}, outside the schedule. Its next run does not change.`, 'primary'],
  };
  const [label, text, kind] = texts[verb];
  const ok = await confirmDialog(`${label}: ${s.name}?`, text, label, kind);
  if (!ok) return;
  try {
    const res = await api.post(`/v1/schedules/${encodeURIComponent(s.name)}/${verb}`);
    if (verb === 'trigger' && res && res.id) {
      statusEl.textContent = `Schedule ${s.name}: job ${res.id} enqueued.`;
    }
  } catch (e) {
    await messageDialog('Failed', e.message);
  }
  render();
}

async function schedulesPage() {
  const res = await api.get('/v1/schedules');
  const list = res.schedules || [];
  const rows = list.map((s) => h('tr', { 'data-schedule': s.name, 'data-paused': s.paused ? 'true' : 'false', class: s.paused ? 'muted' : '' },
    h('td', {}, s.name),
    h('td', {}, scheduleSpec(s)),
    h('td', {}, h('a', { href: `#/jobs?kind=${encodeURIComponent(s.kind || '')}&queue=${encodeURIComponent(s.queue || '')}` }, s.kind || '—'),
      h('span', { class: 'muted' }, ` on ${s.queue || '—'}`)),
    h('td', {}, s.paused ? h('span', { title: `paused ${fmtTime(s.paused_at)}` }, badge('paused')) : badge('active', 'completed')),
    h('td', { class: 'next-run', title: fmtTime(s.next_run) }, s.paused ? '—' : s.next_run ? `${fmtTime(s.next_run)} (${fmtAgo(s.next_run)})` : '—'),
    h('td', { class: 'last-run', title: fmtTime(s.last_run) }, s.last_run ? fmtAgo(s.last_run) : 'never',
      s.last_job_id ? [' ', h('a', { href: `#/jobs/${s.last_job_id}` }, `job ${s.last_job_id}`)] : ''),
    h('td', { title: `occurrences missed for longer than ${s.grace}: ${s.missed === 'run_once' ? 'the latest runs once' : 'skipped'}` }, s.missed === 'run_once' ? 'run once' : 'skip'),
    h('td', { class: 'row-actions' }, h('div', { class: 'actions' },
      h('button', { class: 'small', 'data-needs': 'admin', 'data-action': s.paused ? 'resume' : 'pause', onclick: () => scheduleAction(s, s.paused ? 'resume' : 'pause') },
        s.paused ? 'Resume' : 'Pause'),
      h('button', { class: 'small', 'data-needs': 'admin', 'data-action': 'trigger', disabled: !!s.error, onclick: () => scheduleAction(s, 'trigger') }, 'Run now')))));
  return h('div', {},
    h('h1', {}, 'Schedules'),
    h('div', { class: 'card' },
      list.length === 0
        ? h('p', { class: 'empty' }, 'No periodic schedule is declared: workers declare theirs when they start (WorkerOptions.Periodic, or the "schedules" of serve\'s config file).')
        : [h('p', { class: 'muted' }, 'Each occurrence is enqueued once across every process sharing the store. Times are in this browser\'s time zone.'),
          h('table', { class: 'schedules' },
            h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Schedule'), h('th', {}, 'Kind'), h('th', {}, 'State'),
              h('th', {}, 'Next run'), h('th', {}, 'Last run'), h('th', {}, 'Missed runs'), h('th', {}, ''))),
            h('tbody', {}, rows))]));
}

registerPage('schedules', { page: () => schedulesPage(), refresh: 5 });
