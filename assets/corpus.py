"""Generate the synthetic clinical corpus the tiny model is trained on.

Every example is a chat: a fixed system prompt, a user message holding a numbered synthetic patient
record (15-30 lines: patient, who saw them and why, problems, allergy, medications, labs, vitals,
social and care notes) and a question about a newly started drug, and an assistant answer that first
goes through the medication lines with a yes/no verdict each, then names each interacting medication
with its line, or says that none of them interacts.
Interactions come from `interactions.json`, the free-text lines from `record_details.json`.
Everything is drawn from a seeded `random.Random`, so a seed always gives the same examples. No real
patient data is involved.

Example (abridged): the record has "8. Medication: ramipril 5 mg daily" and "9. Medication:
simvastatin 40 mg at night" and the question starts clarithromycin -> the answer is "Checked lines
8-9: 8 ramipril no, 9 simvastatin yes. Yes, clarithromycin interacts with simvastatin (line 9):
... Advice: ...<|im_end|>".
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

FACTS_PATH = Path(__file__).with_name("interactions.json")

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END]
TRAIN_SEED = 1  # training examples (and the tokenizer) come from this seed only
EVAL_SEED = 9001  # held-out records for quality checks; never used in training
DEFAULT_SEED = 1808  # the first example of this seed is the default request (chosen by eye)
DEFAULT_REQUEST_PATH = Path(__file__).with_name("default_request.json")
POSITIVE_SHARE = 0.6  # questions with an interaction; half the rest ask about a drug from the table
CONTRAST = "iodinated contrast"  # only ever the new "drug" (a scan), never a record medication

SYSTEM_PROMPT = (
    "You are a clinical assistant. Answer only from the patient record and cite the record line "
    "for every medication you name."
)

# The ChatML template written into the GGUF; `render_chat` below renders the same text in Python.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

DETAILS_PATH = Path(__file__).with_name("record_details.json")

QUESTIONS = [
    "Started today: {drug}. Does it interact with anything in the record?",
    "We plan to add {drug}. Any interaction with the current medications?",
    "Is it safe to start {drug} with the current medications?",
    "The patient was prescribed {drug} today. Please check for interactions.",
    "New prescription: {drug}. Does it interact with what the patient takes?",
    "The hospital discharge letter adds {drug}. Anything to watch for with the regular tablets?",
    "Could {drug} cause a problem with any of the medicines listed?",
    "A locum suggested {drug}. Is there an interaction with the record medications?",
    "Before I issue {drug}, please check it against the medication list.",
    "Pharmacist query: patient collecting {drug}. Any clash with current treatment?",
]


@dataclass(frozen=True)
class Example:
    """One chat example: the two prompt messages, the answer and what it should mention."""

    messages: list[dict[str, str]]  # [system, user], each {"role", "content"}
    answer: str  # assistant text, ending with <|im_end|>
    record_drugs: list[str]  # medications on the record
    new_drug: str  # the drug the question asks about
    interacting: list[str]  # record medications that interact with new_drug


def load_facts(path: Path = FACTS_PATH) -> dict:
    """Read the drug catalogue and interaction table; adds "partners" (drug -> sorted partners)
    and "details" (the free-text word lists of `record_details.json`)."""
    facts = json.loads(path.read_text(encoding="utf-8"))
    pairs = interaction_map(facts)
    names = sorted(facts["drugs"])
    facts["partners"] = {d: sorted(x for x in names if frozenset((d, x)) in pairs) for d in names}
    facts["details"] = load_details()
    return facts


def interaction_map(facts: dict) -> dict[frozenset[str], dict]:
    """Map each unordered drug pair to its table entry."""
    return {frozenset(p["drugs"]): p for p in facts["pairs"]}


def render_chat(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """Render messages exactly as CHAT_TEMPLATE does (ChatML)."""
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return text + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def load_details(path: Path = DETAILS_PATH) -> dict:
    """Read the word lists for the records' free-text lines (`record_details.json`)."""
    return json.loads(path.read_text(encoding="utf-8"))


def _lab_lines(rng: random.Random, details: dict) -> list[str]:
    """Recent lab results, 3-8 lines with plausible random values."""
    labs = [
        f"potassium {rng.choice([3.4, 3.9, 4.1, 4.4, 4.6, 4.9, 5.2, 5.5])} mmol/L",
        f"sodium {rng.randint(131, 145)} mmol/L",
        f"creatinine {rng.randint(60, 190)} umol/L",
        f"eGFR {rng.randint(25, 90)} mL/min",
        f"INR {rng.choice([1.1, 2.1, 2.4, 2.8, 3.3])}",
        f"HbA1c {rng.randint(42, 86)} mmol/mol",
        f"haemoglobin {rng.randint(98, 152)} g/L",
        f"ALT {rng.randint(12, 75)} U/L",
        f"TSH {rng.choice([0.9, 1.8, 2.6, 4.1, 6.3])} mU/L",
        f"total cholesterol {rng.choice([3.9, 4.6, 5.2, 6.1])} mmol/L",
    ]
    for name, (low, high), unit in rng.sample(details["labs"], 3):
        value = (rng.randint(low, high) if isinstance(low, int)
                 else round(rng.uniform(low, high), 1))
        labs.append(f"{name} {value} {unit}")
    return rng.sample(labs, rng.randint(3, 8))


def _vital_lines(rng: random.Random) -> list[str]:
    vitals = [
        f"blood pressure {rng.randint(108, 168)}/{rng.randint(62, 98)} mmHg",
        f"pulse {rng.randint(52, 104)} per minute",
        f"weight {rng.randint(48, 118)} kg",
    ]
    return rng.sample(vitals, rng.randint(1, 2))


def _med_text(facts: dict, rng: random.Random, drug: str) -> str:
    info = facts["drugs"][drug]
    return f"{drug} {rng.choice(info['doses'])} {rng.choice(info['freq'])}"


def _pick_drugs(facts: dict, rng: random.Random) -> tuple[str, list[str], list[str]]:
    """Choose the new drug, the interacting record drugs and the other record drugs."""
    names = sorted(facts["drugs"])
    partners = facts["partners"]
    if rng.random() < POSITIVE_SHARE:  # a question with at least one interaction
        pair = rng.choice(facts["pairs"])["drugs"]
        new = CONTRAST if CONTRAST in pair else rng.choice(pair)
        hits = [pair[1] if new == pair[0] else pair[0]]
        more = [d for d in partners[new] if d not in hits]
        if more and rng.random() < 0.2:
            hits.append(rng.choice(more))
    elif rng.random() < 0.5:  # a drug from the table whose partners are all absent
        new, hits = rng.choice([d for d in names if partners[d]]), []
    else:
        new, hits = rng.choice(names), []
    safe = [d for d in names if d != new and d not in partners[new] and d != CONTRAST]
    others = rng.sample(safe, rng.randint(3, 8) - len(hits))
    return new, hits, others


def make_example(facts: dict, rng: random.Random) -> Example:
    """Draw one synthetic record, question and answer.

    Args:
        facts: the catalogue and table from `load_facts`.
        rng: the seeded generator all choices come from.

    Returns:
        The example; its record has 15-30 numbered lines.
    """
    new, hits, others = _pick_drugs(facts, rng)
    meds = hits + others
    rng.shuffle(meds)
    med_texts = {d: _med_text(facts, rng, d) for d in meds}
    details = facts["details"]
    problems = [facts["drugs"][d]["problem"] for d in meds]
    problems = list(dict.fromkeys(problems + rng.sample(details["problems"], rng.randint(0, 2))))
    rng.shuffle(problems)
    sex = rng.choice(["woman", "man"])
    lines = [f"Patient: {rng.randint(34, 91)}-year-old {sex}",
             f"Seen by: Dr {rng.choice(details['surnames'])}, {rng.choice(details['settings'])}"]
    lines += [f"Reason for visit: {rng.choice(details['complaints'])}"] * (rng.random() < 0.8)
    lines += [f"Problem: {p}" for p in problems]
    lines += [f"Allergy: {rng.choice(details['allergies'])}"] * rng.randint(0, 1)
    first_med = len(lines) + 1
    lines += [f"Medication: {med_texts[d]}" for d in meds]
    last_med = len(lines)
    lines += [f"Lab: {x}" for x in _lab_lines(rng, details)]
    lines += [f"Vitals: {x}" for x in _vital_lines(rng)]
    n_notes = max(rng.randint(0, 3), 15 - len(lines))
    lines += [f"Note: {x}" for x in _notes(rng, details, n_notes)]
    lines = lines[:30]
    record = "\n".join(f"{i}. {text}" for i, text in enumerate(lines, start=1))
    question = rng.choice(QUESTIONS).format(drug=_med_text(facts, rng, new))
    user = f"Record:\n{record}\n\nQuestion: {question}"
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
    answer = _answer(facts, new, hits, meds, first_med, last_med)
    return Example(messages, answer, meds, new, sorted(hits, key=meds.index))


def _notes(rng: random.Random, details: dict, count: int) -> list[str]:
    """`count` social and care notes, at most one per kind until every kind is used."""
    kinds = ["occupations", "hobbies", "living", "habits", "care"]
    order = rng.sample(kinds, len(kinds))
    picks = [rng.choice(details[kind]) for kind in order[:count]]
    rest = [x for kind in kinds for x in details[kind] if x not in picks]
    return picks + rng.sample(rest, max(0, count - len(picks)))


def _answer(facts: dict, new: str, hits: list[str], meds: list[str], first_med: int,
            last_med: int) -> str:
    """The assistant answer: a verdict per medication line, then each interaction or 'none'.

    The checked list goes line by line ("12 simvastatin yes"), so each verdict is one lookup of a
    (new drug, record drug) pair, and the summary only repeats drugs the list just copied.
    """
    checked = ", ".join(f"{first_med + i} {drug} {'yes' if drug in hits else 'no'}"
                        for i, drug in enumerate(meds))
    head = f"Checked lines {first_med}-{last_med}: {checked}."
    if not hits:
        return (f"{head} No, {new} has no known interaction with these medications. "
                f"Advice: continue routine monitoring.{IM_END}")
    pairs = interaction_map(facts)
    parts = [head]
    for i, drug in enumerate(sorted(hits, key=meds.index)):
        entry = pairs[frozenset((new, drug))]
        line = first_med + meds.index(drug)
        lead = f"Yes, {new} interacts with" if i == 0 else "It also interacts with"
        parts.append(f"{lead} {drug} (line {line}): {entry['reason']}. "
                     f"Advice: {entry['advice']}.")
    return " ".join(parts) + IM_END


def make_examples(seed: int, count: int, facts: dict | None = None) -> list[Example]:
    """`count` examples from one seed."""
    facts = facts or load_facts()
    rng = random.Random(seed)
    return [make_example(facts, rng) for _ in range(count)]


def training_text(example: Example) -> tuple[str, str]:
    """The rendered prompt (with the assistant header) and the answer, as trained on."""
    return render_chat(example.messages), example.answer


def drugs_named(text: str, facts: dict) -> set[str]:
    """Catalogue drug names that appear in a text (whole words, case-insensitive)."""
    lowered = text.lower()
    return {d for d in facts["drugs"] if re.search(rf"\b{re.escape(d.lower())}\b", lowered)}


def default_request() -> Example:
    """The example shipped as `default_request.json` (first example of DEFAULT_SEED)."""
    return make_examples(DEFAULT_SEED, 1)[0]


def write_default_request(path: Path = DEFAULT_REQUEST_PATH) -> Path:
    """Write the default request's messages as a JSON list of {"role", "content"}."""
    messages = default_request().messages
    path.write_text(json.dumps(messages, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
