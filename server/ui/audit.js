// audit.js: the dashboard's audit log page (registerPage, app.js).

// ---- audit log -----------------------------------------------------------

// The audit log: every change made through the API, the dashboard or the
// CLI on the store, newest first, by pages. Read only.
async function auditPage(params) {
  const before = params.get('before') || '';
  const actor = params.get('actor') || '';
  const res = await api.get('/v1/audit' + qs({ limit: 100, before, actor }));
  const list = res.entries || [];
  const rows = list.map((e) => h('tr', { 'data-audit': e.id, 'data-actor': e.actor },
    h('td', { title: fmtTime(e.at) }, fmtAgo(e.at)),
    h('td', {}, h('a', { href: `#/audit?actor=${encodeURIComponent(e.actor)}` }, e.actor), e.role ? [' ', badge(e.role)] : ''),
    h('td', { class: 'mono' }, e.action),
    h('td', { class: 'mono muted audit-target' }, e.target || ''),
    h('td', { class: 'num' }, e.operation_id ? h('a', { href: '#/operations' }, e.operation_id.slice(0, 11) + '…') : fmtN(e.count)),
    h('td', {}, e.note || ''),
    h('td', { class: 'mono muted' }, e.remote || '')));
  return h('div', {},
    h('h1', {}, 'Audit log'),
    h('div', { class: 'card' },
      actor ? h('p', {}, `Changes by ${actor}. `, h('a', { href: '#/audit' }, 'Everyone')) : '',
      list.length === 0
        ? h('p', { class: 'empty' }, 'No change recorded yet: changes made through the API, this dashboard or the CLI on the store show here.')
        : [h('table', { class: 'audit' },
            h('thead', {}, h('tr', {}, h('th', {}, 'When'), h('th', {}, 'Who'), h('th', {}, 'Action'), h('th', {}, 'Target'),
              h('th', { class: 'num' }, 'Count'), h('th', {}, 'Note'), h('th', {}, 'From'))),
            h('tbody', {}, rows)),
          res.next ? h('p', {}, h('a', { href: `#/audit?${new URLSearchParams({ before: res.next, actor })}`, id: 'older' }, 'Older entries')) : '']));
}

registerPage('audit', { page: (parts, params) => auditPage(params), refresh: 10 });
