// Messages and payloads sent to the dead-letter queue, with the stage and the reason.

import { h, replace, notice } from "../dom.js";
import { deadLettersTable, newestFirst } from "./shared.js";

export default {
  title: "Dead-letter queue",
  nav: "DLQ",
  mount(root, route, ctx) {
    const holder = h("div", {}, notice("Loading…"));
    root.append(holder);
    (async () => {
      try {
        const answer = await ctx.load(ctx.api.get("dlq"));
        replace(holder, deadLettersTable(newestFirst(answer.dead_letters || []), "dlq-table", "Nothing dead-lettered."),
          answer.truncated ? notice("Only the latest rows (debug.max_ui_rows).") : null);
      } catch (err) {
        replace(holder, notice(err.message, "bad"));
      }
    })();
    return {};
  },
};
