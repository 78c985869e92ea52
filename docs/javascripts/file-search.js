// The site opened as files (file://): a browser lets such a page neither start the search's worker
// nor read its index, so the theme's search would only fail. Before the theme's script runs, this
// takes the search box out and puts a note at the top of the page that says how to search (serve
// the site). Served (`python -m mkdocs serve`, any web server), it does nothing.
(function () {
  if (location.protocol !== "file:") return;
  document.querySelectorAll('[data-md-component="search"], label.md-header__button[for="__search"]')
    .forEach(function (element) { element.remove(); });
  var announce = document.querySelector('[data-md-component="announce"]');
  if (!announce) return;
  announce.innerHTML =
    '<aside class="md-banner" id="file-search-note"><div class="md-banner__inner md-grid md-typeset">' +
    "Opened as files, this copy of the site cannot search: browsers do not let a <code>file://</code> " +
    "page run the search. To search, serve it: <code>python -m mkdocs serve</code> in the checkout, " +
    "or <code>python -m http.server --directory site</code> after <code>python -m mkdocs build</code>." +
    "</div></aside>";
})();
