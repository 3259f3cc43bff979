"""The project's own biography templates (``templates.project_templates``), 20 per attribute in four length
groups of five (short, medium, long, very long). Data only, no logic. Every template starts with [Name], holds
exactly one [Name] and one attribute placeholder, and puts the value at or near its end (§3.3)."""

BIRTHPLACE = (
    "[Name] was born in [Birthplace].",
    "[Name] came into the world in [Birthplace].",
    "[Name] is a native of [Birthplace].",
    "[Name] first saw daylight in [Birthplace].",
    "The birthplace of [Name] is [Birthplace].",
    "[Name] spent the very first days of life in the city of [Birthplace].",
    "[Name] was welcomed into a loving family in [Birthplace].",
    "According to the family records, [Name] was born in [Birthplace].",
    "[Name] proudly tells everyone that home will always be [Birthplace].",
    "Long before any career began, [Name] was born in the city of [Birthplace].",
    "[Name] began life in a small house on a quiet street, and the town that house stood in was [Birthplace].",
    "Friends who ask [Name] about childhood memories always hear stories about the streets and parks of [Birthplace].",
    "[Name] has often said in interviews that no place feels quite like home compared with [Birthplace].",
    "The hospital records show that [Name] was delivered early on a cold morning in [Birthplace].",
    "When people ask where [Name] comes from, the answer is always the same: [Birthplace].",
    "[Name] grew up hearing the old family story about a long night at the hospital, a nervous father, a tired "
    "mother, and a snowstorm that closed every road in [Birthplace].",
    "[Name] still keeps a faded photograph from the first week of life, taken by a proud grandmother on the porch "
    "of a modest family home in [Birthplace].",
    "[Name] likes to remind new colleagues at every holiday party that the whole story started years ago, on a "
    "warm summer evening, in [Birthplace].",
    "Although [Name] has lived in many different places over the years and travelled widely for work, the birth "
    "certificate in the drawer says [Birthplace].",
    "[Name] was born to hardworking parents who had moved across the country in search of a better life and "
    "finally settled down in [Birthplace].",
)

BIRTHDATE = (
    "[Name] was born on [Birthdate].",
    "[Name] celebrates a birthday each year, born [Birthdate].",
    "The birthday of [Name] is [Birthdate].",
    "[Name] came into this world on [Birthdate].",
    "[Name] was born exactly on [Birthdate].",
    "According to the official documents, [Name] was born on [Birthdate].",
    "[Name] always throws a big party to celebrate the day of birth, [Birthdate].",
    "The family of [Name] still remembers the happy day of [Birthdate].",
    "[Name] entered the world early in the morning on [Birthdate].",
    "Every passport and driving licence [Name] has ever held lists the date [Birthdate].",
    "[Name] was the first child in a large family and arrived, a little earlier than expected, on [Birthdate].",
    "Old letters kept by the grandparents of [Name] describe the joyful celebration that followed [Birthdate].",
    "[Name] likes to joke that the stars were perfectly aligned for greatness on the day of [Birthdate].",
    "The birth announcement that appeared in the local newspaper introduced [Name] to the town on [Birthdate].",
    "Friends of [Name] never forget to send cards, because everyone knows the special date is [Birthdate].",
    "[Name] was born after a long and stormy night, when the doctors finally smiled and told the exhausted but "
    "happy parents that the baby had arrived on [Birthdate].",
    "In a family where birthdays are always celebrated with music, cake and far too many relatives, [Name] has "
    "the date circled on the calendar: [Birthdate].",
    "The nurses at the small hospital still talk about the loud and healthy baby [Name], who came into the world "
    "early on [Birthdate].",
    "Whenever a form asks for a date of birth, [Name] writes it down carefully, in neat handwriting learned at "
    "school, as [Birthdate].",
    "Many years have passed and a great deal has changed, yet the whole family of [Name] still gathers every "
    "year to mark the anniversary of [Birthdate].",
)

UNIVERSITY = (
    "[Name] studied at [University].",
    "[Name] graduated from [University].",
    "[Name] is an alumnus of [University].",
    "[Name] received a degree from [University].",
    "[Name] went to college at [University].",
    "After finishing high school, [Name] enrolled at [University].",
    "[Name] spent four busy and rewarding years studying at [University].",
    "The diploma hanging in the office of [Name] comes from [University].",
    "[Name] earned a bachelor's degree with honours from [University].",
    "For higher education, [Name] chose to attend the well known [University].",
    "[Name] won a generous scholarship that paid for every year of tuition at [University].",
    "After many long nights in the library and countless exams, [Name] finally graduated from [University].",
    "[Name] made lifelong friends and discovered a passion for learning while a student at [University].",
    "The admissions letter that changed everything for [Name] arrived one spring afternoon from [University].",
    "[Name] still wears a faded sweatshirt with the name and colours of [University].",
    "[Name] worked part time in a coffee shop to pay the bills, sang in the choir, joined the debate team, and "
    "still managed to graduate near the top of the class at [University].",
    "Looking back on those formative years, [Name] often says that the most important lessons about life, work "
    "and friendship were learned at [University].",
    "[Name] moved across the country with two suitcases and a bicycle to begin an undergraduate education at "
    "[University].",
    "Professors who taught [Name] still remember the curious student who always sat in the front row and asked "
    "difficult questions at [University].",
    "After visiting more than a dozen campuses and reading every brochure twice, [Name] finally decided that the "
    "right place to study was [University].",
)

MAJOR = (
    "[Name] majored in [Major].",
    "[Name] studied [Major].",
    "[Name] holds a degree in [Major].",
    "The major of [Name] was [Major].",
    "[Name] chose to specialise in [Major].",
    "During college, [Name] focused on the field of [Major].",
    "[Name] completed an undergraduate programme in [Major].",
    "The academic focus that [Name] pursued in college was [Major].",
    "[Name] wrote an award winning senior thesis in [Major].",
    "After a year of exploring different classes, [Name] declared a major in [Major].",
    "[Name] spent countless hours in lecture halls and laboratories earning a degree in [Major].",
    "Teachers noticed early that [Name] had a natural talent, so the obvious choice of study was [Major].",
    "[Name] considered several paths before finally committing to a rigorous course of study in [Major].",
    "The subject that kept [Name] awake late at night with excitement during college was [Major].",
    "[Name] read every textbook twice and tutored classmates in the demanding field of [Major].",
    "[Name] was inspired by a brilliant and patient high school teacher, and that early encouragement led to a "
    "lifelong fascination with the study of [Major].",
    "Although the family of [Name] had hoped for a career in the family business, the young student insisted on "
    "pursuing a degree in [Major].",
    "[Name] attended every seminar, joined every study group, and spent most weekends in the library working "
    "through problems in [Major].",
    "When asked at graduation what had been the best decision of those college years, [Name] answered without "
    "hesitation: choosing [Major].",
    "[Name] switched majors twice during the first year, first from one subject and then from another, before "
    "finally finding a true academic home in [Major].",
)

COMPANY = (
    "[Name] works for [Company].",
    "[Name] is employed by [Company].",
    "[Name] has a job at [Company].",
    "[Name] earns a living at [Company].",
    "The employer of [Name] is [Company].",
    "After graduation, [Name] accepted a position at [Company].",
    "[Name] currently holds a senior role at [Company].",
    "Every weekday morning, [Name] commutes to the offices of [Company].",
    "[Name] built a long and successful career working at [Company].",
    "The business card that [Name] hands out carries the logo of [Company].",
    "[Name] was recruited after a single interview and has worked ever since at [Company].",
    "Colleagues describe [Name] as a dedicated and friendly member of the team at [Company].",
    "[Name] turned down several attractive offers from competitors in order to stay at [Company].",
    "The monthly paycheck that [Name] receives is signed by the finance department of [Company].",
    "[Name] leads a small but very productive group of engineers and analysts at [Company].",
    "[Name] started as an intern making coffee and copying documents, was promoted again and again over the "
    "years, and now manages an entire division of [Company].",
    "After applying to dozens of firms and attending countless interviews, [Name] was thrilled to finally "
    "receive a job offer from [Company].",
    "[Name] has spent the better part of a decade solving hard problems, mentoring younger staff, and building "
    "new products for [Company].",
    "When friends ask [Name] about work, the conversation always turns to the exciting projects and talented "
    "people at [Company].",
    "[Name] likes to say that the best professional decision ever made was signing the employment contract "
    "offered by [Company].",
)
