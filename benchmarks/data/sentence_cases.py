"""Hand-checked sentence-splitting cases for benchmarks/data/bench_sentence_splitters.py.

Each case is (language code, one paragraph, the expected sentences). A splitter gets a case
right when its sentences, stripped, equal the expected ones exactly. The cases are written
for this benchmark: abbreviations ("Mr.", "e.g.", "4 A. M."), numbers, quotes, ellipses,
URLs, German, French, Spanish, Russian, and Chinese/Japanese (。！？).
"""

from __future__ import annotations

from typing import List, Tuple

Case = Tuple[str, str, List[str]]


def _c(lang: str, *sentences: str) -> Case:
    """A case whose paragraph is its sentences joined by one space ("" for CJK)."""
    sep = "" if lang in ("zh", "ja") else " "
    return lang, sep.join(sentences), list(sentences)


CASES: List[Case] = [
    # English: abbreviations.
    _c("en", "Mr. Smith went to Washington.", "He arrived on Monday."),
    _c("en", "Dr. Jones and Mrs. Brown met at St. Mary's church.", "They talked for hours."),
    _c("en", "Prices rose, e.g. bread and milk, by 3 percent.", "Nobody was surprised."),
    _c("en", "The meeting starts at 4 A. M. tomorrow.", "Please be on time."),
    _c("en", "He woke at 4 A. M. and made coffee.", "The house was quiet."),
    _c("en", "Prof. Miller teaches at MIT.", "Her course is popular."),
    _c("en", "The U.S. economy grew in 2019.", "Growth slowed in 2020."),
    _c("en", "See Fig. 3 for the results.", "They are clear."),
    _c("en", "The company, Acme Inc., was founded in 1990.", "It makes anvils."),
    _c("en", "Approx. 50 people came, i.e. fewer than expected.", "The hall was half empty."),
    _c("en", "J. R. R. Tolkien wrote The Hobbit.", "It was published in 1937."),
    _c("en", "The vote was 5 vs. 4 in favour.", "The bill passed."),
    _c("en", "It happened at 10 p.m. on Friday.", "Police arrived later."),
    _c("en", "Version 2.0 was released in Jan. 2021.", "It fixed many bugs."),
    _c("en", "Sen. Warren spoke first.", "Gov. Newsom followed."),
    _c("en", "The U.K. and the E.U. signed the deal.", "Trade resumed."),
    _c("en", "No. 5 was the winning ticket.", "It paid well."),
    _c("en", "He lives on Baker St. near the park.", "His flat is small."),
    _c("en", "Jan. and Feb. were cold.", "March was mild."),
    _c("en", "The patient, aged 45 yrs., was discharged.", "She recovered fully."),
    # English: numbers.
    _c("en", "The value of pi is about 3.14159.", "It is irrational."),
    _c("en", "She paid $4.50 for coffee.", "It was cold."),
    _c("en", "The first item costs 1,000.00 dollars.", "The second is cheaper."),
    _c("en", "The temperature was -3.5 degrees.", "Roads froze overnight."),
    _c("en", "Our budget is $2.5 million.", "That is enough!"),
    _c("en", "Section 3.2 covers methods.", "Section 3.3 covers results."),
    _c("en", "Call me at 555-1234.", "Or write to me."),
    _c("en", "Growth was 0.5% in Q3.", "Analysts expected more."),
    # English: quotes, ellipses, ? and !.
    _c("en", "\"I can't go,\" she said.", "\"Why not?\" he asked."),
    _c("en", "He shouted, \"Stop!\"", "Then he ran."),
    _c("en", "'Really?' she asked.", "'Yes,' he said."),
    _c("en", "He read \u201cWar and Peace.\u201d", "Then he slept."),
    _c("en", "Wait... what happened here?", "Nobody knows."),
    _c("en", "I was thinking...", "Maybe we should leave."),
    _c("en", "This costs 5 dollars... or more.", "Expect delays."),
    _c("en", "Is this real?", "Yes!", "It is."),
    _c("en", "What?!", "You did what?"),
    _c("en", "He asked: why now?", "Nobody answered."),
    _c("en", "\"Go home.\"", "She did."),
    # English: URLs, e-mail, file names, plain.
    _c("en", "Visit https://example.com/path.html for details.", "The site is free."),
    _c("en", "Email john.doe@example.org if needed.", "We reply fast."),
    _c("en", "Open report.final.pdf and read it.", "Then sign it."),
    _c("en", "Go to www.example.co.uk today.", "It is fast."),
    _c("en", "He said no.", "She said yes."),
    _c("en", "This is a single sentence without a final period"),
    _c("en", "The study (published in 2020) found no effect.", "However, critics disagreed.",
       "A follow-up is planned."),
    _c("en", "Lobsters turn red when cooked (see below).", "They are blue in life."),
    # German.
    _c("de", "Herr Müller kam um 8 Uhr.", "Er war pünktlich."),
    _c("de", "Das ist z. B. ein Test.", "Er funktioniert gut."),
    _c("de", "Am 3. Oktober ist Feiertag.", "Dann sind die Geschäfte zu."),
    _c("de", "Dr. Schmidt wohnt in Berlin.", "Sie ist Ärztin."),
    _c("de", "Wie geht es dir?", "Mir geht es gut."),
    _c("de", "Das kostet ca. 5 Euro.", "Das ist günstig."),
    # French.
    _c("fr", "M. Dupont est arrivé hier.", "Il est très fatigué."),
    _c("fr", "Il a dit : « Je viens demain. »", "Puis il est parti."),
    _c("fr", "Quelle heure est-il ?", "Il est midi."),
    _c("fr", "Le prix est de 3,50 euros.", "C'est cher."),
    _c("fr", "Mme Martin habite à Paris.", "Elle aime la ville."),
    # Spanish.
    _c("es", "¿Dónde está la biblioteca?", "Está cerca del parque."),
    _c("es", "¡Qué sorpresa!", "No lo esperaba."),
    _c("es", "El Sr. García llegó tarde.", "La reunión ya había empezado."),
    _c("es", "La Dra. López trabaja en el hospital.", "Es cirujana."),
    _c("es", "El precio subió un 2,5 por ciento.", "Los clientes se quejaron."),
    # Russian.
    _c("ru", "Привет.", "Как дела?"),
    _c("ru", "Это произошло в 1990 г. в Москве.", "Никто не знал."),
    _c("ru", "Он сказал: «Я приду завтра».", "Она кивнула."),
    _c("ru", "Цена составила 3,14 руб. за штуку.", "Это дорого."),
    _c("ru", "Мы приехали в 5 ч. утра.", "Все спали."),
    # Chinese.
    _c("zh", "我今天很高兴。", "你呢？"),
    _c("zh", "他说：“我明天来。”", "然后他走了。"),
    _c("zh", "这是第一句！", "这是第二句。", "这是第三句？"),
    _c("zh", "价格是3.14元。", "很便宜。"),
    # Japanese.
    _c("ja", "今日は晴れです。", "明日は雨でしょう。"),
    _c("ja", "本当ですか？", "はい、本当です！"),
    _c("ja", "彼は「行きます。」と言った。", "私は驚いた。"),
    _c("ja", "価格は1.5万円です。", "高いですね。"),
]
