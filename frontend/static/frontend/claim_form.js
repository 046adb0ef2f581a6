/* The claim form shows only the section of the chosen kind (whole GPUs, a MIG slice or a fraction):
 * the fields of the other kinds do not apply. Without JavaScript every section shows and the server
 * ignores the ones the kind does not read.
 */
(function () {
  "use strict";

  var form = document.querySelector("[data-claim-form]");
  if (!form) return;
  var kind = form.elements.kind;
  var sections = form.querySelectorAll("fieldset[data-kind]");

  function show() {
    for (var i = 0; i < sections.length; i++) {
      sections[i].hidden = sections[i].getAttribute("data-kind") !== kind.value;
    }
  }

  kind.addEventListener("change", show);
  show();
})();
