// schedules.js: the dashboard's schedules page (registerPage, app.js).
'use strict';
