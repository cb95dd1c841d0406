// breakers.js: the dashboard's breakers page (registerPage, app.js).
'use strict';
