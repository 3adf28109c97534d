// Messages and payloads sent to the dead-letter queue, with the stage and the reason.

import { h, replace, notice } from "../dom.js";
import { deadLettersTable, newestFirst } from "./shared.js";

export default {
  title: "Dead-letter queue",
  nav: "DLQ",
  mount(root, route, ctx) {
    const holder = h("div", {}, notice("Loading…"));
    root.append(holder);
    let letters = null;
    const show = (truncated) => replace(holder, deadLettersTable(letters, "dlq-table", "Nothing dead-lettered."),
      truncated ? notice("Only the latest rows (debug.max_ui_rows).") : null);
    (async () => {
      try {
        const answer = await ctx.load(ctx.api.get("dlq"));
        letters = newestFirst(answer.dead_letters || []);
        show(answer.truncated);
      } catch (err) {
        replace(holder, notice(err.message, "bad"));
      }
    })();
    return {
      onEvent(event) {
        if (letters && event.kind === "dead_lettered") {
          letters.unshift(event);
          show(false);
        }
      },
    };
  },
};
