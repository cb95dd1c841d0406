// workflows.js: the dashboard's workflows pages (registerPage, app.js):
// the list of workflows with their progress, and a workflow's page with
// its graph (each job's state), its jobs and their dependencies, the
// failure policy, its callbacks, and a cancel for operate and admin.
'use strict';

const WF_POLICY = {
  wait: 'wait: the dependents of a dead job stay blocked until it is redriven and completes',
  cancel: 'cancel: the dependents of a dead job are canceled',
  run: 'run anyway: the dependents of a dead job run, and see its failure',
};

// WF_STATE_BADGE maps a workflow's state to a badge's colors.
const WF_STATE_BADGE = { active: 'running', succeeded: 'completed', finished: 'dead', canceled: 'canceled' };

// WF_GRAPH_MAX bounds the jobs the graph draws; a larger workflow shows
// its table only.
const WF_GRAPH_MAX = 300;
// WF_TABLE_MAX bounds the rows of a workflow's jobs table.
const WF_TABLE_MAX = 1000;

// wfProgress is a workflow's progress: a bar of its finished jobs and
// the counts of completed, dead and canceled ones out of its total.
function wfProgress(w) {
  const finished = w.completed + w.dead + w.canceled;
  return h('span', { class: 'wf-progress' },
    h('progress', { max: String(Math.max(w.total, 1)), value: String(finished) }),
    h('span', { class: 'wf-counts' },
      `${fmtN(w.completed)} completed`,
      w.dead > 0 && h('span', { class: 'error' }, `, ${fmtN(w.dead)} dead`),
      w.canceled > 0 && `, ${fmtN(w.canceled)} canceled`,
      h('span', { class: 'muted' }, ` of ${fmtN(w.total)}`)));
}

async function workflowsPage(params) {
  const before = params.get('before') || '';
  const res = await api.get('/v1/workflows' + qs({ before, limit: 50 }));
  const list = res.workflows || [];
  const rows = list.map((w) => h('tr', { class: 'click', 'data-workflow': w.id, 'data-state': w.state, onclick: () => go(`#/workflows/${w.id}`) },
    h('td', { class: 'num' }, h('a', { href: `#/workflows/${w.id}` }, w.id)),
    h('td', {}, w.name || h('span', { class: 'muted' }, '—')),
    h('td', {}, badge(w.state, WF_STATE_BADGE[w.state])),
    h('td', { title: WF_POLICY[w.on_dead] || '' }, w.on_dead),
    h('td', {}, wfProgress(w)),
    h('td', { title: fmtTime(w.created_at) }, fmtAgo(w.created_at))));
  return h('div', {},
    h('h1', {}, 'Workflows'),
    h('div', { class: 'card' },
      list.length === 0
        ? h('p', { class: 'empty' }, before ? 'No older workflow.' : 'No workflow yet: enqueue one with Client.EnqueueWorkflow, POST /v1/workflows or redrive workflows enqueue.')
        : [h('table', { class: 'workflows' },
          h('thead', {}, h('tr', {}, h('th', { class: 'num' }, 'ID'), h('th', {}, 'Name'), h('th', {}, 'State'), h('th', {}, 'If a job dies'),
            h('th', {}, 'Progress'), h('th', {}, 'Created'))),
          h('tbody', {}, rows)),
        h('div', { class: 'pager' },
          before && h('a', { href: '#/workflows' }, 'Newest'),
          res.next && h('a', { href: `#/workflows?before=${encodeURIComponent(res.next)}`, id: 'older' }, 'Older'))]));
}

// wfLayers returns each job's depth in the graph: 0 without
// dependencies, else one more than its deepest dependency.
function wfLayers(jobs) {
  const byID = new Map(jobs.map((j) => [j.job_id, j]));
  const depth = new Map();
  const visit = (j) => {
    if (depth.has(j.job_id)) return depth.get(j.job_id);
    depth.set(j.job_id, 0); // a cycle cannot be enqueued; this only stops one
    let d = 0;
    for (const a of j.after) {
      const dep = byID.get(a);
      if (dep) d = Math.max(d, visit(dep) + 1);
    }
    depth.set(j.job_id, d);
    return d;
  };
  jobs.forEach(visit);
  return depth;
}

// wfGraph draws the workflow's jobs as boxes in columns by depth, each
// in its state's colors and linking to the job, with an arrow from each
// dependency to its dependent.
function wfGraph(w, blockedBy) {
  const depth = wfLayers(w.jobs);
  const cols = [];
  for (const j of w.jobs) {
    const d = depth.get(j.job_id);
    (cols[d] = cols[d] || []).push(j);
  }
  const bw = 150, bh = 40, gx = 60, gy = 14, pad = 8;
  const pos = new Map();
  cols.forEach((col, c) => col.forEach((j, r) => pos.set(j.job_id, { x: pad + c * (bw + gx), y: pad + r * (bh + gy) })));
  const width = pad * 2 + cols.length * bw + (cols.length - 1) * gx;
  const height = pad * 2 + Math.max(...cols.map((c) => c.length)) * (bh + gy) - gy;
  const edges = [];
  for (const j of w.jobs) {
    const to = pos.get(j.job_id);
    for (const a of j.after) {
      const from = pos.get(a);
      if (!from) continue;
      const x1 = from.x + bw, y1 = from.y + bh / 2, x2 = to.x, y2 = to.y + bh / 2;
      edges.push(s('path', { class: 'wf-edge', d: `M${x1},${y1} C${x1 + gx / 2},${y1} ${x2 - gx / 2},${y2} ${x2 - 4},${y2}`, 'marker-end': 'url(#wf-arrow)' }));
    }
  }
  const nodes = w.jobs.map((j) => {
    const p = pos.get(j.job_id);
    const label = j.name.length > 20 ? j.name.slice(0, 19) + '…' : j.name;
    const note = j.state === 'dead' && blockedBy.get(j.job_id) ? ` · ${blockedBy.get(j.job_id)} blocked` : '';
    return s('a', { href: `#/jobs/${j.job_id}`, class: 'wf-node', 'data-node': j.name, 'data-state': j.state },
      s('title', {}, `${j.name} (${j.kind}): ${j.state}, job ${j.job_id}`),
      s('rect', { class: `wf-box s-${j.state}`, x: p.x, y: p.y, width: bw, height: bh, rx: 6 }),
      s('text', { x: p.x + 10, y: p.y + 16, class: 'wf-name' }, label),
      s('text', { x: p.x + 10, y: p.y + 31, class: 'wf-state' }, j.state + note));
  });
  return s('svg', { class: 'wf-graph', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': `graph of workflow ${w.id}` },
    s('defs', {}, s('marker', { id: 'wf-arrow', viewBox: '0 0 8 8', refX: 7, refY: 4, markerWidth: 7, markerHeight: 7, orient: 'auto' },
      s('path', { d: 'M0,0 L8,4 L0,8 z', class: 'wf-arrowhead' }))),
    edges, nodes);
}

// wfCancel cancels the workflow after the operator confirms.
async function wfCancel(w) {
  const ok = await confirmDialog(`Cancel workflow ${w.id}?`,
    'Its pending, scheduled and blocked jobs are canceled, and cancellation is requested of its running ones; the callbacks that have not fired are canceled. Completed and dead jobs are kept.',
    'Cancel workflow', 'danger');
  if (!ok) return;
  try {
    await api.post(`/v1/workflows/${w.id}/cancel`);
    statusEl.textContent = `Workflow ${w.id} canceled.`;
  } catch (e) {
    await messageDialog('Failed', e.message);
  }
  render();
}

async function workflowPage(id) {
  const w = await api.get(`/v1/workflows/${encodeURIComponent(id)}`);
  const jobs = w.jobs || [];
  const byID = new Map(jobs.map((j) => [j.job_id, j]));
  // A dead job's blocked dependents: under wait its edges stay not done
  // until it completes, so every blocked job waiting for it is; under
  // cancel and run its dependents were canceled or released at its death.
  const blockedBy = new Map();
  if (w.on_dead === 'wait') {
    for (const j of jobs) {
      if (j.state !== 'blocked') continue;
      for (const a of j.after) {
        const dep = byID.get(a);
        if (dep && dep.state === 'dead') blockedBy.set(a, (blockedBy.get(a) || 0) + 1);
      }
    }
  }
  const live = w.state === 'active';
  const counts = Object.entries(w.counts || {}).sort((a, b) => b[1] - a[1]);
  const callbacks = [['on_success', 'on success'], ['on_complete', 'on complete'], ['on_death', 'on death']]
    .filter(([k]) => w[k]).map(([k, label]) => h('span', { class: 'wf-callback' }, `${label}: `, h('a', { href: `#/jobs/${w[k]}` }, `job ${w[k]}`)));
  const rows = jobs.slice(0, WF_TABLE_MAX).map((j) => h('tr', { 'data-job': j.job_id, 'data-node': j.name },
    h('td', {}, h('a', { href: `#/jobs/${j.job_id}` }, j.name)),
    h('td', { class: 'num' }, j.job_id),
    h('td', {}, j.kind),
    h('td', {}, badge(j.state, j.state),
      blockedBy.get(j.job_id) ? h('span', { class: 'muted blocked-deps' }, ` ${fmtN(blockedBy.get(j.job_id))} blocked`) : ''),
    h('td', { class: 'wf-after' }, j.after.length === 0 ? h('span', { class: 'muted' }, '—')
      : j.after.map((a, i) => [i ? ', ' : '', h('a', { href: `#/jobs/${a}`, class: byID.get(a) && byID.get(a).state === 'dead' ? 'error' : '' },
        byID.get(a) ? byID.get(a).name : `job ${a}`)]))));
  return h('div', { 'data-live': live ? 'true' : null },
    h('h1', {}, `Workflow ${w.id}`, w.name ? h('span', { class: 'muted' }, ` ${w.name}`) : ''),
    h('div', { class: 'row' },
      h('div', { class: 'card wf-facts' },
        h('dl', { class: 'kv' },
          h('dt', {}, 'State'), h('dd', { id: 'wf-state' }, badge(w.state, WF_STATE_BADGE[w.state])),
          h('dt', {}, 'If a job dies'), h('dd', { id: 'wf-policy' }, WF_POLICY[w.on_dead] || w.on_dead),
          h('dt', {}, 'Progress'), h('dd', {}, wfProgress(w)),
          h('dt', {}, 'Jobs by state'), h('dd', { id: 'wf-counts' }, counts.map(([st, n], i) => [i ? ' ' : '', badge(`${st} ${fmtN(n)}`, st)])),
          callbacks.length > 0 && [h('dt', {}, 'Callbacks'), h('dd', {}, callbacks.map((c, i) => [i ? ' · ' : '', c]))],
          w.idempotency_key && [h('dt', {}, 'Idempotency key'), h('dd', { class: 'mono' }, w.idempotency_key)],
          h('dt', {}, 'Created'), h('dd', {}, `${fmtTime(w.created_at)} (${fmtAgo(w.created_at)})`),
          w.canceled_at && [h('dt', {}, 'Canceled'), h('dd', {}, fmtTime(w.canceled_at))]),
        h('div', { class: 'actions' },
          live && h('button', { class: 'danger', id: 'cancel-workflow', 'data-needs': 'operate', onclick: () => wfCancel(w) }, 'Cancel workflow')))),
    h('div', { class: 'card wf-graph-card' },
      h('h3', {}, 'Graph'),
      jobs.length > WF_GRAPH_MAX
        ? h('p', { class: 'muted' }, `${fmtN(jobs.length)} jobs: too many to draw; the table below lists them.`)
        : h('div', { class: 'wf-graph-wrap' }, wfGraph(w, blockedBy))),
    h('div', { class: 'card' },
      h('h3', {}, 'Jobs'),
      jobs.length > WF_TABLE_MAX && h('p', { class: 'muted' }, `The first ${fmtN(WF_TABLE_MAX)} of ${fmtN(jobs.length)} jobs, by id.`),
      h('table', { class: 'wf-jobs' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', { class: 'num' }, 'Job'), h('th', {}, 'Kind'), h('th', {}, 'State'), h('th', {}, 'Waits for'))),
        h('tbody', {}, rows))));
}

registerPage('workflows', {
  page: (parts, params) => (parts[0] ? workflowPage(parts[0]) : workflowsPage(params)),
  refresh: 3,
});
