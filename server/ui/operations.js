// operations.js: the dashboard's operations page (registerPage, app.js).
'use strict';
