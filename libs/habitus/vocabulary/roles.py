"""Job titles in canonical form: lower-case, in plain English, without seniority.

"Senior Data Analyst", "data analyst" and "Datenanalystin" are all `data analyst`: a
profile says what someone does, and seniority or a word for "freelance" only splits one
role into several that would compete for one key. Known abbreviations are spelled out
("PM" is `product manager`, "dev" `developer`).
"""

from __future__ import annotations

import re

#: words that say how senior or how employed, not what the job is
SENIORITY = frozenset(
    """senior junior sr sr. jr jr. principal staff freelance freelancing freelancer mid-level
    midlevel entry-level lead-level graduate intern-level chief-of first-year second-year
    phd ph.d master's masters undergrad undergraduate postdoc postdoctoral""".split())
#: short forms spelled out
SHORT = {"dev": "developer", "devs": "developer", "eng": "engineer", "pm": "product manager",
         "em": "engineering manager", "prof": "teacher", "profe": "teacher",
         "swe": "software engineer", "ds": "data scientist", "rep": "representative",
         "reps": "representative"}
#: titles in German, French and Spanish, in English
TRANSLATED = {
    "entwickler": "developer", "entwicklerin": "developer",
    "softwareentwickler": "software developer", "softwareentwicklerin": "software developer",
    "ingenieur": "engineer", "ingenieurin": "engineer", "datenanalyst": "data analyst",
    "datenanalystin": "data analyst", "produktmanager": "product manager",
    "produktmanagerin": "product manager", "studentin": "student", "student": "student",
    "lehrer": "teacher", "lehrerin": "teacher", "anwalt": "lawyer", "anwältin": "lawyer",
    "designerin": "designer", "übersetzer": "translator", "übersetzerin": "translator",
    "développeur": "developer", "développeuse": "developer", "ingénieur": "engineer",
    "ingénieure": "engineer", "étudiant": "student", "étudiante": "student",
    "professeur": "teacher", "professeure": "teacher", "avocat": "lawyer", "avocate": "lawyer",
    "chef de produit": "product manager", "cheffe de produit": "product manager",
    "traducteur": "translator", "traductrice": "translator",
    "desarrollador": "developer", "desarrolladora": "developer", "ingeniero": "engineer",
    "ingeniera": "engineer", "diseñador": "designer", "diseñadora": "designer",
    "estudiante": "student", "profesor": "teacher", "profesora": "teacher",
    "abogado": "lawyer", "abogada": "lawyer", "jefe de producto": "product manager",
    "jefa de producto": "product manager", "analista de datos": "data analyst",
    "ingeniero de datos": "data engineer", "ingeniera de datos": "data engineer",
    "traductor": "translator", "traductora": "translator",
    "krankenpfleger": "nurse", "krankenpflegerin": "nurse", "pflegekraft": "nurse",
    "arzt": "doctor", "ärztin": "doctor", "apotheker": "pharmacist", "apothekerin": "pharmacist",
    "elektriker": "electrician", "buchhalter": "accountant", "buchhalterin": "accountant",
    "azubi": "apprentice", "infirmier": "nurse", "infirmière": "nurse", "médecin": "doctor",
    "comptable": "accountant", "pharmacien": "pharmacist", "pharmacienne": "pharmacist",
    "enfermero": "nurse", "enfermera": "nurse", "médico": "doctor", "médica": "doctor",
    "contador": "accountant", "contadora": "accountant", "farmacéutico": "pharmacist",
    "farmacéutica": "pharmacist", "architekt": "architect", "architektin": "architect",
    "berater": "consultant", "beraterin": "consultant", "projektleiter": "project manager",
    "projektleiterin": "project manager", "projektmanager": "project manager",
    "projektmanagerin": "project manager", "managerin": "manager",
    "chef de projet": "project manager", "cheffe de projet": "project manager",
    "jefe de proyecto": "project manager", "jefa de proyecto": "project manager",
}
#: the first part of a German compound title, in English ("Softwarearchitektin": software
#: architect, "Datenanalyst": data analyst)
_COMPOUND_PREFIXES = {"software": "software", "daten": "data", "produkt": "product",
                      "system": "systems", "web": "web", "cloud": "cloud", "frontend": "frontend",
                      "backend": "backend", "netzwerk": "network", "sicherheits": "security",
                      "it": "it", "ux": "ux", "ui": "ui", "test": "test", "lösungs": "solutions"}


def _compound(word: str) -> str | None:
    """A German compound title in English words ("softwarearchitektin" -> "software
    architect"), or None when it is no prefix this knows before a title this knows."""
    for prefix, english in _COMPOUND_PREFIXES.items():
        if word.startswith(prefix) and word[len(prefix):] in TRANSLATED:
            return f"{english} {TRANSLATED[word[len(prefix):]]}"
    return None
#: the last word of a role: what makes "data engineer" a job and "big fan" none
HEADS = frozenset(
    """engineer developer programmer designer manager scientist analyst architect researcher
    student teacher professor lawyer doctor nurse writer editor journalist consultant founder
    cto ceo cfo coo cpo director lead intern freelancer contractor sre admin administrator
    accountant marketer recruiter entrepreneur maintainer translator pharmacist electrician
    copywriter plumber dentist therapist psychologist veterinarian vet chef cook pilot mechanic
    carpenter photographer musician artist librarian technician apprentice advisor adviser
    specialist coordinator officer assistant paralegal physician surgeon economist
    statistician mathematician physicist chemist biologist owner tester paramedic executive
    representative salesperson banker broker trader planner strategist receptionist secretary
    clerk cashier""".split())
#: words that say which kind of a job, in any of the four languages' order
QUALIFIERS = frozenset(
    """backend frontend front-end back-end full-stack fullstack devops data web mobile ios android
    cloud platform security ml software qa ux ui product""".split())
_WORD_RE = re.compile(r"[\w+#./'-]+")


#: endings that make a word a job whatever its stem: a cardiologist, a pediatrician, a
#: physiotherapist, a psychiatrist
_HEAD_ENDINGS = ("ologist", "iatrist", "ician", "therapist")


def is_head(word: str) -> bool:
    """Whether `word` can end a role: a job word of the vocabulary, or one by its ending."""
    return word in HEADS or (len(word) > 7 and word.endswith(_HEAD_ENDINGS))


#: titles said over a part of an organisation ("VP of Sales", "Head of Engineering"): the
#: last word is the department, so the title decides that it is a job
OVER = {"head": "head", "vp": "vp", "svp": "svp", "evp": "evp", "director": "director",
        "chief": "chief", "vice president": "vp", "senior vice president": "svp",
        "executive vice president": "evp", "manager": "manager", "lead": "lead"}
#: the parts of an organisation such a title is over, as said after "of"
DEPARTMENTS = frozenset(
    """engineering product sales marketing design data operations ops finance people hr
    growth security infrastructure platform research support it legal technology analytics
    partnerships talent recruiting communications content brand strategy revenue procurement
    quality compliance risk ux ai ml devops staff customer-success customer-experience
    business-development developer-relations""".split())
_OVER_RE = re.compile(
    rf"^(?P<title>{'|'.join(sorted(OVER, key=len, reverse=True))})\s+of\s+(?:the\s+)?"
    r"(?P<dept>[a-z]+(?:[\s-][a-z]+)?)$")


def _title_over(phrase: str) -> str | None:
    """"vp of sales", "head of engineering", "chief of staff": the title and what it is
    over, or None when the words after "of" are no department ("head of the line")."""
    m = _OVER_RE.match(phrase)
    if m is None:
        return None
    dept = m.group("dept")
    if dept.replace(" ", "-") not in DEPARTMENTS:
        return None
    return f"{OVER[m.group('title')]} of {dept.replace('-', ' ')}"


def canonical_role(text: str) -> str | None:
    """The role `text` names, in canonical form, or None when its last word is no job."""
    tokens = _WORD_RE.findall(text.lower())
    start = 0
    while start < len(tokens) and tokens[start] in SENIORITY:  # "senior director of product"
        start += 1  # only leading ones: "staff" ends "chief of staff"
    over = _title_over(" ".join(tokens[start:]))
    if over is not None:
        return over
    words: list[str] = []
    for raw in tokens:
        head, dash, rest = raw.partition("-")
        if dash and rest in TRANSLATED:  # "backend-entwickler"
            words += [head, *TRANSLATED[rest].split()]
        elif raw in SENIORITY:
            continue
        elif raw not in TRANSLATED and (compound := _compound(raw)) is not None:
            words += compound.split()  # "softwarearchitektin"
        else:
            words += SHORT.get(raw, raw).split()
    # French and Spanish put the qualifier after the noun: "développeur backend" is a
    # backend developer, "ingeniero DevOps" a devops engineer
    if len(words) >= 2 and words[0] in TRANSLATED and all(w in QUALIFIERS for w in words[1:]):
        words = [*words[1:], words[0]]
    phrase = " ".join(words)
    if phrase in TRANSLATED:
        phrase = TRANSLATED[phrase]
    for foreign, english in TRANSLATED.items():
        if phrase.endswith(" " + foreign) and " " in foreign:
            phrase = phrase[: -len(foreign)] + english
    words = phrase.split()
    if words and words[-1] in TRANSLATED:
        words = [*words[:-1], *TRANSLATED[words[-1]].split()]
    if words and words[-1] == "student":
        words = ["student"]  # "nursing student", "engineering student": a student
    if not words or not is_head(words[-1]) or len(words) > 4:
        return None
    return " ".join(words)
