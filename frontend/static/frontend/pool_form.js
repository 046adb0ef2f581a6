/* Hints of the node-pool form. No framework, no build step.
 *
 * The page embeds every GPU model's hints as JSON (#pool-hints-data, frontend/pool_hints.py). When the
 * GPU model or the sharing mode changes, this shows which drivers fit the chosen GPU and why the others
 * do not, which sharing modes it allows and its MIG profiles; it disables the driver and sharing-mode
 * options that do not fit (moving the choice to one that does) and caps GPUs per node. It shows what
 * the tenant may get of the GPU in the cluster's region, and warns while the pool asks for more (its
 * nodes would wait) or may grow past what the quota leaves (the create would be refused). Without
 * JavaScript the form still works: the server refuses what does not fit, next to the field, and asks
 * before creating a pool that would wait.
 */
(function () {
  "use strict";

  var data = document.getElementById("pool-hints-data");
  var form = document.querySelector("[data-pool-form]");
  if (!data || !form) return;
  var embedded = JSON.parse(data.textContent);
  var hints = embedded.models;
  var capacity = embedded.capacity; // null: an attached cluster's own nodes
  var model = form.elements.gpu_model;
  var sharing = form.elements.sharing_mode;
  var driver = form.elements.driver_release;
  var gpus = form.elements.gpus_per_node;
  var nodes = form.elements.node_count;
  var maxNodes = form.elements.max_nodes;
  var box = document.getElementById("pool-hints");
  var warning = document.getElementById("pool-capacity-warning");
  var waitField = document.getElementById("field-wait_for_capacity");

  function element(tag, className, text) {
    var el = document.createElement(tag);
    if (className) el.className = className;
    if (text !== undefined) el.textContent = text;
    return el;
  }

  // Enable the options that fit; if the chosen one does not, choose the first that does.
  function fitOptions(select, reasonOf) {
    var firstFit = null;
    Array.prototype.forEach.call(select.options, function (option) {
      var reason = reasonOf(option.value);
      option.disabled = Boolean(reason);
      option.title = reason || "";
      if (!reason && firstFit === null) firstFit = option;
    });
    if (select.selectedOptions[0] && select.selectedOptions[0].disabled && firstFit) {
      firstFit.selected = true;
    }
  }

  function render() {
    var hint = hints[model.value];
    if (!hint) return;
    fitOptions(sharing, function (mode) {
      return hint.sharing[mode];
    });
    var fits = hint.drivers[sharing.value === "mig" ? "mig" : "other"];
    fitOptions(driver, function (version) {
      return (fits[version] || []).join(" ");
    });
    gpus.max = hint.max_gpus_per_node;

    var good = [];
    var bad = [];
    Object.keys(fits).forEach(function (version) {
      if (fits[version].length) bad.push([version, fits[version]]);
      else good.push(version);
    });
    var allowed = Object.keys(hint.sharing).filter(function (mode) {
      return !hint.sharing[mode];
    });

    box.textContent = "";
    box.appendChild(element("p", "hints-title", hint.display_name + ": " + hint.summary + "."));
    var list = element("ul", "hints-list");
    var drivers = element("li", good.length ? "hint-ok" : "hint-bad");
    drivers.setAttribute("data-hint", "drivers");
    drivers.textContent = good.length
      ? "Drivers that fit" + (sharing.value === "mig" ? " with MIG" : "") + ": " + good.join(", ") + "."
      : "No offered driver fits this GPU" + (sharing.value === "mig" ? " with MIG" : "") + ".";
    list.appendChild(drivers);
    bad.forEach(function (pair) {
      var li = element("li", "hint-bad", pair[0] + " does not fit: " + pair[1].join(" "));
      li.setAttribute("data-hint", "driver-refused");
      list.appendChild(li);
    });
    var modes = element("li", "hint-ok", "Sharing modes it allows: " + allowed.join(", ") + ".");
    modes.setAttribute("data-hint", "sharing");
    list.appendChild(modes);
    if (hint.mig_profiles.length) {
      var mig = element("li", "", "MIG profiles: " + hint.mig_profiles.join(", ") + ".");
      mig.setAttribute("data-hint", "mig");
      list.appendChild(mig);
    } else if (hint.sharing.mig) {
      var noMig = element("li", "hint-bad", hint.sharing.mig);
      noMig.setAttribute("data-hint", "mig");
      list.appendChild(noMig);
    }
    if (capacity) list.appendChild(capacityHint(hint));
    box.appendChild(list);
    warn(hint);
  }

  function capacityHint(hint) {
    var offer = capacity[model.value];
    var li = offer
      ? element(
          "li",
          offer.available_gpus ? "hint-ok" : "hint-bad",
          "In " + embedded.region + " you may add " + offer.available_gpus + " " + hint.display_name +
            " GPUs now (" + offer.bound + ")."
        )
      : element("li", "hint-bad", "Region " + embedded.region + " has no " + hint.display_name + " GPUs.");
    li.setAttribute("data-hint", "capacity");
    return li;
  }

  function count(input) {
    var value = parseInt(input.value, 10);
    return isNaN(value) ? 0 : value;
  }

  // The server's sentences (pool_hints.shortfall, the quota's refusal) while the numbers change; the
  // "create it anyway" box shows only while some nodes would wait.
  function warn(hint) {
    if (!capacity || !warning) return;
    var offer = capacity[model.value];
    var perNode = count(gpus);
    var wanted = count(nodes);
    var short = "";
    var refused = "";
    if (!wanted) {
      short = "";
    } else if (!offer) {
      short = "Region " + embedded.region + " has no " + hint.display_name + " GPUs: the pool's nodes would wait pending.";
    } else if (perNode * wanted > offer.available_gpus) {
      var waiting = wanted - Math.floor(offer.available_gpus / Math.max(perNode, 1));
      short = "This pool asks for " + perNode * wanted + " " + hint.display_name + " GPUs; you may get " +
        offer.available_gpus + " in " + embedded.region + " now (" + offer.bound + "): " + waiting +
        " of its " + wanted + " nodes would wait pending.";
    }
    if (offer && offer.quota_left_gpus !== null && perNode * count(maxNodes) > offer.quota_left_gpus) {
      refused = "It may grow to " + perNode * count(maxNodes) + " GPUs (maximum nodes × GPUs per node), more " +
        "than the " + offer.quota_left_gpus + " your quota leaves: it would be refused.";
    }
    warning.textContent = "";
    [short, refused].filter(Boolean).forEach(function (text) {
      warning.appendChild(element("p", "", text));
    });
    warning.hidden = !(short || refused);
    if (waitField && !waitField.classList.contains("field-invalid")) waitField.hidden = !short;
  }

  model.addEventListener("change", render);
  sharing.addEventListener("change", render);
  [gpus, nodes, maxNodes].forEach(function (input) {
    input.addEventListener("input", function () {
      if (hints[model.value]) warn(hints[model.value]);
    });
  });
  render();
})();
