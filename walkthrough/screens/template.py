"""The Chat stage: the messages (editable), the file's chat template, and the text it renders.

The messages can be added to, edited and deleted (a small editor); every change
re-renders the template, re-tokenizes and restarts the request, which keeps
from the engine's cache every token before the first one that changed. After
the answer, f adds a follow-up message (the answer goes into the history as
the assistant's message). A line under the views says what the request reused
and why reuse stopped there; c plays the scripted four calls
(`four_calls.FourCallsScreen`). The rendered view marks special tokens and
shows which text came from which message.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import OptionList, Static, TabbedContent, TabPane
from textual.widgets.option_list import Option

from walkthrough.inspect.template import PLAIN, content_text, suggest_template
from walkthrough.inspect.template_roles import known_roles
from walkthrough.render.reuse_text import first_token_lines, reuse_lines
from walkthrough.render.views import SPECIAL_STYLE
from walkthrough.request.calls import CallsInput
from walkthrough.screens.base import StageScreen
from walkthrough.screens.confirm import delete_question, discard_question
from walkthrough.screens.editor import MessageEditor
from walkthrough.screens.four_calls import FourCallsScreen
from walkthrough.screens.typeahead import when_shown
from walkthrough.textsafe import safe_text, visible
from walkthrough.words import count

VIEWS = ("messages", "source", "rendered")
MESSAGE_STYLES = ("cyan", "green", "yellow", "magenta")  # text of message i, cycling
PREVIEW_CHARS = 60


def rendered_text(chat) -> Text:
    """The rendered prompt: special tokens reversed, each message's text in its colour, template text dim."""
    text = Text()
    special = {(t.start, t.end) for t in chat.tokens if t.special and t.end > t.start}
    for region in chat.regions:
        pos = region.start
        for start, end in sorted(s for s in special if region.start <= s[0] < region.end):
            if start > pos:
                text.append_text(_region_text(chat.text[pos:start], region.message))
            text.append_text(safe_text(chat.text[start:end], SPECIAL_STYLE, keep_newlines=True))
            pos = end
        if pos < region.end:
            text.append_text(_region_text(chat.text[pos:region.end], region.message))
    return text


def _region_text(piece: str, message: int | None) -> Text:
    style = "dim" if message is None else MESSAGE_STYLES[message % len(MESSAGE_STYLES)]
    return safe_text(piece, style, keep_newlines=True)


class TemplateScreen(StageScreen):
    """Messages in, one string out."""

    HEADING = "the chat template"
    CAPTION = ("The chat becomes one text, written by the model's own template with "
               "its special markers.")
    HELP = """
A chat model is trained on conversations written in one exact format. The chat
template, a small Jinja program stored in the GGUF file, writes the list of
messages in that format: role markers, special tokens around each message, and
at the end the start of the assistant's turn, which is where the model
continues.

Messages: a to add, e or enter to edit (ctrl+s saves, escape cancels), d to
delete the highlighted message. Every change renders and tokenizes again and
restarts the request; the engine keeps its cache up to the first token that
changed, so only the rest is computed again. Once the answer is complete, f
writes a follow-up: the answer joins the messages as the assistant's, your
message follows, and the new request reuses everything the cache holds of it.
The line under the views says how many prompt tokens the request took from the
cache, how many it computes, and why reuse stopped where it did: the first
token that differs, on both sides, and its cause (a changed message, a template
that writes an earlier turn differently, the date). c plays four calls (the
request, a follow-up, an edit, a new chat with the same system prompt), each
measured with and without reuse, then the cold and warm starts. u unloads the
model (its KV cache and dequantized weights are dropped, as a server does after
its keep-alive): the next run pays the first use of every weight again, and
the "first token" line compares it with the warm runs.

Source: the template as stored in the file. A file may hold several (the
default one and named ones such as tool_use): t switches to the next and
renders the messages with it. r switches to plain text and back: no template,
the messages' text is the prompt (a blank line between two), tokenized as
llama.cpp's completion does, BOS first if the file says so; that is how a base
model continues a text. A file without a chat template starts in plain text,
and t offers llama.cpp's built-in templates by name (the one the file's name
suggests first). Rendered: the text the template wrote, special
tokens in reverse video, each message's text in its own colour, the template's
own text dimmed. v switches between the three views.
"""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("v", "next_view", "View", id="template.view"),
        Binding("a", "add", "Add", id="template.add"),
        Binding("e", "edit", "Edit", id="template.edit"),
        Binding("d", "delete", "Delete", id="template.delete"),
        Binding("t", "next_template", "Template", id="template.next"),
        Binding("r", "plain", "Plain text", id="template.plain"),
        Binding("f", "follow_up", "Follow up", id="template.follow_up"),
        Binding("c", "four_calls", "Four calls", id="template.calls"),
        Binding("u", "app.unload", "Unload", id="template.unload"),
    ]

    def compose_body(self) -> ComposeResult:
        with TabbedContent(id="template-views"):
            with TabPane("Messages", id="messages"):
                yield OptionList(id="message-list")
            with TabPane("Source", id="source"), VerticalScroll():
                yield Static(id="template-source")
            with TabPane("Rendered", id="rendered"), VerticalScroll():
                yield Static(id="template-rendered")
        yield Static(id="reuse-line")

    def refresh_view(self) -> None:
        state = self.state
        lines = reuse_lines(state.steps, state.piece) + first_token_lines(state.first_tokens)
        reuse = safe_text("\n".join(lines), keep_newlines=True)
        too_long = state.context_problem
        self.query_one("#reuse-line", Static).update(
            reuse if too_long is None else Group(Text.assemble(("Cannot run the request: ", "bold red"),
                                                               safe_text(too_long)), reuse))
        if state.messages != self._listed:
            self._list_messages()
        problem = state.unavailable.get("template") or state.unavailable.get("tokens")
        source = state.template_source
        self.query_one("#template-source", Static).update(
            Group(self._template_line(), safe_text(source, keep_newlines=True)) if source
            else Group(self._template_line(), Text("Plain text: no template, the messages' text (a blank line "
                                                   "between two) is the prompt, tokenized as llama.cpp's "
                                                   "completion does.")) if state.plain
            else Text(problem or "No template yet.")
        )
        rendered = self.query_one("#template-rendered", Static)
        if state.chat is not None:
            header = Text(f"{count(len(state.chat.text), 'character')}; special tokens reversed, messages in colour",
                          style="italic")
            warnings = [Text(f"note: {visible(w)}", style="yellow") for w in state.chat.warnings]
            rendered.update(Group(header, *warnings, rendered_text(state.chat)))
        elif state.rendered is not None:
            rendered.update(safe_text(state.rendered, keep_newlines=True))
        else:
            rendered.update(Text.assemble(("Cannot render: ", "bold"), safe_text(problem or "still preparing")))

    def _template_line(self) -> Text:
        """Which template is shown (or plain text), and how to switch."""
        state = self.state
        names = state.template_names
        name = state.current_template
        line = Text.assemble(("template ", "bold"), safe_text(name))
        if name in names and len(names) > 1:
            line.append(f"  ({names.index(name) + 1} of {len(names)}: ", style="dim")
            line.append_text(safe_text(", ".join(names), "dim"))
            line.append("; t switches, r: plain text)", style="dim")
        if state.template_file is None and names and names[0] == PLAIN:
            line.append("\nThe file has no chat template (a base model?). ", style="italic")
            hint = suggest_template(state.file) if state.file is not None else None
            line.append("t tries llama.cpp's built-in templates" + (
                f"; {hint[0]} first: {hint[1]}" if hint else ""), style="italic")
        return line

    def _list_messages(self) -> None:
        """Fill the message list (only when the messages changed, so the highlight stays put)."""
        messages = self.state.messages
        self._listed = [dict(m) for m in messages]
        options = self.query_one("#message-list", OptionList)
        highlighted = options.highlighted
        options.clear_options()
        for i, message in enumerate(messages):
            content = content_text(message.get("content"))
            line = Text.assemble((f"{i + 1}. ", "bold"), safe_text(f"{message.get('role', '?')}: ", "bold"),
                                 safe_text(content[:PREVIEW_CHARS] + ("…" if len(content) > PREVIEW_CHARS else "")))
            options.add_option(Option(line))
        if messages:
            options.highlighted = min(highlighted or 0, len(messages) - 1)

    def on_mount(self) -> None:
        self._listed: list[dict[str, str]] | None = None  # (Textual runs StageScreen.on_mount after this one)
        self.query_one("#message-list").focus()

    def action_next_view(self) -> None:
        tabs = self.query_one(TabbedContent)
        tabs.active = VIEWS[(VIEWS.index(tabs.active) + 1) % len(VIEWS)]

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """Focus what scrolls in the active view, so up/down/page keys move through it.

        The view active now, not the event's: after `vv` typed quickly the first view's event arrives once the
        second view is active, and focusing inside the first would switch back to it (a lost key).
        """
        pane = self.query_one(TabbedContent).active_pane
        if pane is not None:
            pane.query("OptionList, VerticalScroll").first().focus()

    def _highlighted(self) -> int | None:
        index = self.query_one("#message-list", OptionList).highlighted
        return index if index is not None and index < len(self.state.messages) else None

    @when_shown
    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.action_edit()

    def action_add(self) -> None:
        self._edit(None, {"role": "user", "content": ""})

    def action_edit(self) -> None:
        index = self._highlighted()
        if index is not None:
            self._edit(index, dict(self.state.messages[index]))

    def _edit(self, index: int | None, message: dict[str, str]) -> None:
        title = "New message" if index is None else f"Message {index + 1}"

        def done(result: dict | None) -> None:
            if result is None:
                return
            messages = list(self.state.messages)
            if index is None:
                messages.append(result)
            else:
                messages[index] = result
            self._changed(messages)

        self.app.push_screen(MessageEditor(message, title, known_roles(self.state.template_source),
                                           ask=self._run_loss_question), done)

    def _run_loss_question(self) -> str | None:
        """What a changed prompt throws away (the run so far), asked when an edit is saved; None: nothing."""
        return discard_question(self.state, self.app.stepping)

    def action_next_template(self) -> None:
        """Render the messages with the file's next chat template (named ones, such as tool_use); asks first
        when the run so far would be lost."""
        if not self.state.has_other_template:
            self.notify("This file has only one chat template.", title="Template", markup=False)
            return

        def switch() -> None:
            if self.state.next_template():
                self._changed(self.state.messages)

        self.app.discard_then(switch)

    def action_plain(self) -> None:
        """Switch between plain text (the messages' text is the prompt, as llama.cpp's completion) and the
        template."""
        if self.state.template_file is not None:
            self.notify("A --template file is in use; plain text is --raw.", title="Plain text", markup=False)
            return

        def switch() -> None:
            if self.state.toggle_plain():
                self._changed(self.state.messages)

        self.app.discard_then(switch)

    def action_delete(self) -> None:
        """Delete the highlighted message, once the user said yes (the message, and the run, are lost)."""
        index = self._highlighted()
        if index is None:
            return
        messages = self.state.messages

        def delete() -> None:
            if self.state.messages is messages:  # still the list the question was about
                self._changed([m for i, m in enumerate(messages) if i != index])

        self.app.ask_then(delete_question(self.state, index, self.app.stepping), delete)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """f needs a complete answer; c needs the engine, the tokenizer, the template and a prompt that fits the
        context (else greyed)."""
        state = self.state
        if action == "follow_up":
            return True if state.finished and state.answer_ids() else None
        if action == "four_calls":
            ready = state.engine_ready and state.tokenizer is not None and state.template_source is not None
            return True if ready and state.context_problem is None else None
        return True

    def action_follow_up(self) -> None:
        """Write the next user message; the answer goes into the history as the assistant's message."""
        state = self.state
        if not (state.finished and state.answer_ids()):
            return
        from walkthrough.engine.serving.turns import answer_text, follow_up

        answer = answer_text(state.tokenizer, state.answer_ids(), state.model.config.end_ids)

        def done(result: dict | None) -> None:
            if result is not None:
                self._changed(follow_up(state.messages, answer, str(result.get("content") or "")))

        self.app.push_screen(MessageEditor({"role": "user", "content": ""}, "Follow-up message",
                                           known_roles(self.state.template_source)), done)

    def action_four_calls(self) -> None:
        state = self.state
        calls = CallsInput(state.path, state.file, state.tokenizer, state.template_source, list(state.messages),
                           state.settings, state.chunk, state.max_new_tokens, state.max_memory)
        self.app.push_screen(FourCallsScreen(calls))

    def _changed(self, messages: list[dict[str, str]]) -> None:
        self.state.messages = messages
        self.app.rebuild_prompt()
