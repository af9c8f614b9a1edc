#!/usr/bin/env python3
"""Writes data/sharegpt-sample.json: a small ShareGPT-format prompt set written for tokentap
(no downloaded data). Deterministic: re-running gives the same file. 20 long, 20 moderate and 20
short first human turns, so every prompt-shape bucket of `tokentap bench` has prompts. Also
writes data/sharegpt-conversations.json: 24 conversations of 3 to 6 answered human turns, for
`tokentap bench --multi-turn`."""
import json, random, os

random.seed(42)
topics = ["a payments service", "a hospital scheduling system", "a weather data pipeline", "a mobile game backend",
          "a library catalogue", "a logistics dashboard", "a compiler test suite", "a translation memory",
          "a recommendation engine", "a home energy monitor"]
asks = ["Summarise the following notes in five bullet points.", "Find the three biggest risks in this design.",
        "Rewrite this as a short status update for the team.", "List the open questions a reviewer would ask.",
        "Explain this to a new engineer joining next week."]
facts = ["The service handles {n} requests per second at peak and {m} on a quiet night.",
         "Latency at the 99th percentile rose from {n} ms to {m} ms after the last release.",
         "The team of {n} engineers owns {m} services and rotates the on-call weekly.",
         "A nightly batch job reprocesses {n} thousand records and takes about {m} minutes.",
         "The cache hit rate is {n} percent, and each miss costs roughly {m} milliseconds.",
         "Storage grows by {n} gigabytes a week; the current volume has {m} gigabytes free.",
         "Two regions serve traffic; failover was last tested {n} days ago and took {m} seconds.",
         "The API has {n} endpoints, of which {m} are deprecated but still called.",
         "Error budgets allow {n} minutes of downtime a month; {m} were used so far.",
         "Deployments happen {n} times a week and {m} of the last twenty were rolled back."]
short_qs = ["What is a good name for {t}?", "Give me one tip for testing {t}.", "Is Rust a good fit for {t}? Answer briefly.",
            "Write a haiku about {t}.", "What metric matters most for {t}?", "Explain backpressure in one paragraph for {t}.",
            "Suggest a logo idea for {t}.", "What could go wrong at 3 a.m. with {t}?"]

def notes(target_chars, rng=random):
    out = []
    while sum(len(s) + 1 for s in out) < target_chars:
        out.append(rng.choice(facts).format(n=rng.randint(2, 900), m=rng.randint(2, 900)))
    return " ".join(out)

entries = []
def add(kind, i, prompt):
    entries.append({"id": f"tokentap-{kind}-{i:02d}", "conversations": [
        {"from": "human", "value": prompt},
        {"from": "gpt", "value": "Here is what I found: " + notes(200)}]})

for i in range(20):
    t = random.choice(topics)
    add("long", i, f"{random.choice(asks)} The notes are about {t}.\n\n" + notes(random.randint(3000, 4800)))
for i in range(20):
    t = random.choice(topics)
    add("moderate", i, f"{random.choice(asks)} The notes are about {t}.\n\n" + notes(random.randint(1000, 2600)))
for i in range(20):
    t = random.choice(topics)
    q = random.choice(short_qs).format(t=t)
    add("short", i, q if i % 2 else q + " Context: " + notes(random.randint(80, 500)))
random.shuffle(entries)
path = os.path.join(os.path.dirname(__file__), "..", "data", "sharegpt-sample.json")
with open(path, "w") as f:
    json.dump(entries, f, indent=1)
    f.write("\n")
print(f"wrote {len(entries)} conversations to {os.path.normpath(path)}")

# data/sharegpt-conversations.json: conversations for `tokentap bench --multi-turn` (3 to 6
# human turns each, every one answered). A generator of its own, so the file above is unchanged.
crng = random.Random(7)
follow_ups = ["Which of these would you fix first, and why?", "Shorten that to three sentences.",
              "What would you measure to know it worked?", "Write the first step as a checklist.",
              "What would a sceptical reviewer say?", "Turn that into a message for the on-call channel.",
              "Which number in the notes worries you most?", "Now explain it to a product manager.",
              "What should we stop doing?", "Give me a title for this."]

def cnotes(target_chars):
    return notes(target_chars, crng)

conversations = []
for i in range(24):
    t = crng.choice(topics)
    first = f"{crng.choice(asks)} The notes are about {t}.\n\n" + cnotes(crng.randint(600, 2400))
    turns = [{"from": "human", "value": first}]
    for k in range(crng.randint(3, 6)):
        if k:
            turns.append({"from": "human", "value": crng.choice(follow_ups)})
        turns.append({"from": "gpt", "value": "Here is my answer: " + cnotes(crng.randint(300, 1200))})
    conversations.append({"id": f"tokentap-conversation-{i:02d}", "conversations": turns})
cpath = os.path.join(os.path.dirname(__file__), "..", "data", "sharegpt-conversations.json")
with open(cpath, "w") as f:
    json.dump(conversations, f, indent=1)
    f.write("\n")
print(f"wrote {len(conversations)} conversations to {os.path.normpath(cpath)}")
