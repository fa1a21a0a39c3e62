// The console's only script, loaded from its own origin (the CSP forbids
// inline scripts). Pages work without it; it adds copy buttons and asks
// before destructive forms.
(function () {
  'use strict';

  // <button data-copy="ID">: copies the text of element ID and says so in
  // the button's status region.
  document.addEventListener('click', function (event) {
    var button = event.target.closest('button[data-copy]');
    if (!button) return;
    var source = document.getElementById(button.getAttribute('data-copy'));
    var status = document.getElementById(button.getAttribute('data-copy') + '-status');
    if (!source || !navigator.clipboard) return;
    navigator.clipboard.writeText(source.textContent.trim()).then(function () {
      if (status) status.textContent = 'Copied.';
    }, function () {
      if (status) status.textContent = 'Copying failed: select the text and copy it.';
    });
  });

  // <form data-confirm="question">: asks before submitting.
  document.addEventListener('submit', function (event) {
    var question = event.target.getAttribute('data-confirm');
    if (question && !window.confirm(question)) event.preventDefault();
  });
})();

// <element data-refresh="N">: reloads the page after N seconds (a page
// following a job until it ends).
(function () {
  'use strict';
  var el = document.querySelector('[data-refresh]');
  if (!el) return;
  var seconds = parseInt(el.getAttribute('data-refresh'), 10);
  if (seconds > 0) window.setTimeout(function () { window.location.reload(); }, seconds * 1000);
})();
